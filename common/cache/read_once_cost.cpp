#include "common/cache/read_once_cost.hpp"

#include <algorithm>
#include <memory>

#include "common/measure/attend_rate.hpp"
#include "kernels/decode_attention_cpu.hpp"

namespace kvheap {

AttentionRates cpu_attention_rates(const ModelConfig& config, DType kv, double read_gbps,
                                   double cache_bytes) {
  auto loops = std::make_shared<const CpuAttendRates>(config.n_kv_heads, config.head_dim, kv,
                                                      config.group_size());
  return {read_gbps * 1e9, cache_bytes, [loops](int heads) { return loops->flops_per_s(heads); },
          loops->seconds()};
}

AttentionDims attention_dims(const ModelConfig& config, DType kv) {
  return {config.n_kv_heads, config.group_size(), config.head_dim, dtype_size(kv)};
}

GroupPrice price_group(int rows, int positions, const AttentionDims& dims,
                       const AttentionRates& rates, bool cached) {
  GroupPrice p;
  p.rows = rows;
  p.positions = positions;
  const double r = rows, L = positions, bw = rates.read_bytes_per_s;
  const double flops = r * L * dims.n_kv_heads * dims.group * dims.head_flops();
  const double once_bytes = L * dims.position_bytes();
  p.plain_s = flops / rates.flops_per_s(dims.group) + (cached ? 1.0 : r) * once_bytes / bw;
  // The wide pass leaves a partial state per wide head and chunk of positions (its accumulator,
  // maximum and sum), written once and read back by the merge.
  const double chunks = std::max(1, (positions + cpu::kAttendChunk - 1) / cpu::kAttendChunk);
  const double partial_bytes =
      2.0 * chunks * r * dims.n_kv_heads * dims.group * (dims.head_dim + 2.0) * sizeof(float);
  p.read_once_s = flops / rates.flops_per_s(rows * dims.group) + (once_bytes + partial_bytes) / bw;
  p.read_once = p.read_once_s <= (1.0 - kReadOnceMargin) * p.plain_s;
  return p;
}

ReadOnceChoice choose_read_once(const SharedPrefixPlan& plan, const AttentionDims& dims,
                                const AttentionRates& rates) {
  ReadOnceChoice c;
  const int G = plan.groups();
  double shared_bytes = 0;  // every group's positions, each once
  for (int g = 0; g < G; ++g) shared_bytes += plan.prefix_len[g] * dims.position_bytes();
  const bool cached = shared_bytes <= rates.cache_bytes / 2;
  std::vector<int> begin = plan.prefix_begin;  // moved down where a parent is dropped
  for (int g = 0; g < G; ++g) {
    const int rows = plan.indptr[g + 1] - plan.indptr[g];
    GroupPrice p = price_group(rows, plan.prefix_end(g) - begin[g], dims, rates, cached);
    p.begin = begin[g];
    c.prices.push_back(p);
    if (p.read_once) {
      c.plan.rows.insert(c.plan.rows.end(), plan.rows.begin() + plan.indptr[g],
                         plan.rows.begin() + plan.indptr[g + 1]);
      c.plan.indptr.push_back(static_cast<int>(c.plan.rows.size()));
      c.plan.prefix_begin.push_back(begin[g]);
      c.plan.prefix_len.push_back(plan.prefix_end(g) - begin[g]);
      continue;
    }
    // Dropped: its children (later groups that begin where it ends, among its rows) take its
    // positions. A row is in one group per level, so a child's first row names its parent.
    const auto first = plan.rows.begin() + plan.indptr[g];
    const auto last = plan.rows.begin() + plan.indptr[g + 1];
    for (int h = g + 1; h < G; ++h)
      if (plan.prefix_begin[h] == plan.prefix_end(g) &&
          std::find(first, last, plan.rows[plan.indptr[h]]) != last)
        begin[h] = begin[g];
  }
  return c;
}

}  // namespace kvheap
