// The CPU twin of shared-prefix attention (kernels/shared_prefix_attention.cu): a shared prefix
// read once for all the rows that share it.
//
// The prefix pass is grouped-query attention with a larger group. A KV head's rows are already
// read once for its `group` query heads; for a shared prefix its query heads are those of all r
// rows, r x group of them, so the same inner loops (attend_span) read each prefix block once and
// apply it to every row. Nothing is copied: the rows keep their page tables, and the prefix pass
// reads through the first row's. In a tree of prefixes every level is such a pass over its own
// positions, and a row merges the partial states of every level of its path, then its own.
#pragma once

#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/attend_product_cpu.hpp"
#include "kernels/attention_merge.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "kernels/shared_prefix_attention.hpp"

namespace kvheap {

namespace cpu {

/// \brief Causal attention of a batch's rows like attend_batch, with each group of `plan` reading
/// its shared prefix once for all its rows.
///
/// \param rows_of   rows_of(i) is batch row i's accessor (must not throw)
/// \param n_ctx_of  n_ctx_of(i) is how many positions batch row i attends to
/// \param q         [n, n_heads, head_dim]
/// \param out       [n, n_heads, head_dim] written
///
/// Rows in no group go through attend_batch unchanged, so a plan without groups gives bitwise
/// attend_batch's result. The work items, all independent, are chunks of kAttendChunk positions
/// of each group's shared positions (for all its rows) and each grouped row's positions past its
/// deepest group, split into head ranges as attend_batch's are (head_ranges); the merge of the
/// partial states follows.
template <class T, class RowsOf, class CtxOf>
void attend_batch_shared_prefix(const AttendShape& sh, int n, const RowsOf& rows_of,
                                const CtxOf& n_ctx_of, const SharedPrefixPlan& plan, const float* q,
                                float* out) {
  const int q_dim = sh.q_dim(), n_heads = sh.n_heads(), hd = sh.head_dim, kvh = sh.n_kv_heads;
  const int group = sh.group;

  if (plan.groups() == 0) {  // nothing shared: plain attention, with no copies of q and out
    attend_batch<T>(sh, n, rows_of, n_ctx_of, q, out);
    return;
  }
  // Rows that share nothing: attend_batch over them, gathered and scattered.
  std::vector<char> grouped(n, 0);
  for (int r : plan.rows) grouped[r] = 1;
  std::vector<int> alone;
  for (int i = 0; i < n; ++i)
    if (!grouped[i]) alone.push_back(i);
  if (!alone.empty()) {
    const long m = static_cast<long>(alone.size());
    std::vector<float> q_alone(m * q_dim), out_alone(m * q_dim);
    for (long j = 0; j < m; ++j)
      std::copy_n(q + alone[j] * static_cast<long>(q_dim), q_dim, &q_alone[j * q_dim]);
    attend_batch<T>(
        sh, static_cast<int>(m), [&](int j) { return rows_of(alone[j]); },
        [&](int j) { return n_ctx_of(alone[j]); }, q_alone.data(), out_alone.data());
    for (long j = 0; j < m; ++j)
      std::copy_n(&out_alone[j * q_dim], q_dim, out + alone[j] * static_cast<long>(q_dim));
  }

  // The prefix pass sees a group of r rows as one row with r x group query heads per KV head:
  // wide head h * (r * group) + m * group + j is head h * group + j of the group's m-th row.
  const int G = plan.groups();
  std::vector<long> wide_at(G + 1, 0);  // offset of each group's wide queries, in heads
  for (int g = 0; g < G; ++g)
    wide_at[g + 1] = wide_at[g] + static_cast<long>(plan.indptr[g + 1] - plan.indptr[g]) * n_heads;
  std::vector<float> wide_q(wide_at[G] * hd);
  for (int g = 0; g < G; ++g) {
    const int r = plan.indptr[g + 1] - plan.indptr[g];
    for (int m = 0; m < r; ++m)
      for (int h = 0; h < kvh; ++h)
        for (int j = 0; j < group; ++j) {
          const long wide = wide_at[g] + static_cast<long>(h) * r * group + m * group + j;
          const float* src = q + static_cast<long>(plan.rows[plan.indptr[g] + m]) * q_dim +
                             static_cast<long>(h * group + j) * hd;
          std::copy_n(src, hd, &wide_q[wide * hd]);
        }
  }
  // Work items read whole cache rows (every KV head of a position), as attend_batch's do: items
  // of one KV head would read a 1/n_kv_heads slice of each row, a strided pattern the hardware
  // prefetchers follow badly. A group's shared positions go in chunks of kAttendChunk, each
  // leaving a partial state per wide head; each grouped row's own positions are one item.
  std::vector<int> first_chunk(G + 1, 0);
  for (int g = 0; g < G; ++g)
    first_chunk[g + 1] =
        first_chunk[g] + std::max(1, (plan.prefix_len[g] + kAttendChunk - 1) / kAttendChunk);
  const int chunks = first_chunk[G];
  std::vector<long> part_at(chunks + 1, 0);  // offset of each chunk's partial state, in heads
  for (int g = 0; g < G; ++g)
    for (int ch = first_chunk[g]; ch < first_chunk[g + 1]; ++ch)
      part_at[ch + 1] = part_at[ch] + (wide_at[g + 1] - wide_at[g]);
  std::vector<float> part_acc(part_at[chunks] * hd), part_max(part_at[chunks]),
      part_sum(part_at[chunks]);
  std::vector<int> group_of_chunk(chunks);
  for (int g = 0; g < G; ++g)
    for (int ch = first_chunk[g]; ch < first_chunk[g + 1]; ++ch) group_of_chunk[ch] = g;
  // The grouped rows, each once however many levels it is in, and their paths (the groups they
  // are in, parents first, and where their own positions begin). Their own passes' states are
  // [R, n_heads], their accumulators in `out`.
  const SharedPrefixPlan::Paths paths = plan.paths(n);
  std::vector<int> grouped_rows;
  for (int i = 0; i < n; ++i)
    if (paths.at[i + 1] > paths.at[i]) grouped_rows.push_back(i);
  const int R = static_cast<int>(grouped_rows.size());
  std::vector<float> own_max(static_cast<long>(R) * n_heads), own_sum(own_max.size());
  int widest = 0;
  for (int g = 0; g < G; ++g) widest = std::max(widest, plan.indptr[g + 1] - plan.indptr[g]);

  long work = 0;
  for (int i : grouped_rows) work += 2L * n_ctx_of(i) * q_dim;
  const bool parallel = work >= (1L << 16);
  // Head ranges per item, as in attend_batch: the fewest that leave the threads' shares within
  // kRangeSlack of even, so that each item reads as wide a part of each row as it can.
  const long items = chunks + R;
  const long threads = parallel ? omp_get_max_threads() : 1;
  const int ranges = head_ranges(items, threads, kvh, kRangeSlack);
  const int per_range = kvh / ranges;
#pragma omp parallel if (parallel)
  {
    std::vector<float> scratch(std::max(attend_span_scratch_floats(per_range * widest * group, hd),
                                        attend_product_scratch_floats(widest * group, hd)));
    std::vector<float> own(hd);
#pragma omp for schedule(dynamic)
    for (long item = 0; item < items * ranges; ++item) {
      const long unit = item / ranges;
      const int h0 = static_cast<int>(item % ranges) * per_range;
      if (unit < chunks) {  // a chunk of a group's shared positions, for all its rows at once
        const int ch = static_cast<int>(unit), g = group_of_chunk[ch];
        const int r = plan.indptr[g + 1] - plan.indptr[g];
        const int t0 = plan.prefix_begin[g] + (ch - first_chunk[g]) * kAttendChunk;
        const long at = part_at[ch] + static_cast<long>(h0) * r * group;
        const auto span = product_pays(r * group) ? attend_span_product<T, decltype(rows_of(0))>
                                                  : attend_span<T, decltype(rows_of(0))>;
        span(&wide_q[wide_at[g] * hd], rows_of(plan.rows[plan.indptr[g]]), t0,
             std::min(plan.prefix_end(g), t0 + kAttendChunk), AttendShape{kvh, r * group, hd}, h0,
             h0 + per_range, &part_acc[part_at[ch] * hd], &part_max[at], &part_sum[at],
             scratch.data());
      } else {  // a grouped row's own positions past its deepest group
        const int j = static_cast<int>(unit - chunks), i = grouped_rows[j];
        const long at = static_cast<long>(j) * n_heads + static_cast<long>(h0) * group;
        attend_span<T>(q + static_cast<long>(i) * q_dim, rows_of(i), paths.first[i], n_ctx_of(i),
                       AttendShape{kvh, group, hd}, h0, h0 + per_range,
                       out + static_cast<long>(i) * q_dim, &own_max[at], &own_sum[at],
                       scratch.data());
      }
    }
    // Merge per (grouped row, query head): each group of its path, parents first, its chunks in
    // order; then the row's own positions.
#pragma omp for schedule(static)
    for (long jh = 0; jh < static_cast<long>(R) * n_heads; ++jh) {
      const int j = static_cast<int>(jh / n_heads), qh = static_cast<int>(jh % n_heads);
      const int i = grouped_rows[j];
      float* o = out + static_cast<long>(i) * q_dim + static_cast<long>(qh) * hd;
      std::copy_n(o, hd, own.data());
      std::fill(o, o + hd, 0.0f);
      SoftmaxState state;
      for (int e = paths.at[i]; e < paths.at[i + 1]; ++e) {
        const int g = paths.group[e], m = paths.member[e];
        const int r = plan.indptr[g + 1] - plan.indptr[g];
        const long wide = static_cast<long>(qh / group) * r * group + m * group + qh % group;
        for (int ch = first_chunk[g]; ch < first_chunk[g + 1]; ++ch) {
          const long p = part_at[ch] + wide;
          merge_partial(state, o, SoftmaxState{part_max[p], part_sum[p]}, &part_acc[p * hd], hd);
        }
      }
      merge_partial(state, o, SoftmaxState{own_max[jh], own_sum[jh]}, own.data(), hd);
      finish_head(o, state.sum, hd);
    }
  }
}

}  // namespace cpu

}  // namespace kvheap
