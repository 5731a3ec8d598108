#include "common/measure/attend_rate.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/attend_product_cpu.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "kernels/kv_types.hpp"
#include "kernels/paged_attention.hpp"

namespace kvheap {
namespace {

// Positions of the measured span, a whole number of blocks: few enough that its K and V stay in
// a core's L2 for small models and in the last-level cache for large ones (8 KV heads of 128 in
// bf16: 512 KiB), read again and again, so that the rate is the loops' more than the memory's.
constexpr int kPositions = 128;
constexpr int kBlock = 16;
constexpr int kRuns = 3;
// Flops each thread does in one timed run: about a millisecond of the loops; the best of kRuns
// runs counts.
constexpr double kRunFlops = 2e7;

template <class T>
double measure_rate(int n_kv_heads, int head_dim, int heads) {
  const long kv_dim = static_cast<long>(n_kv_heads) * head_dim;
  std::vector<T> k(kPositions * kv_dim), v(kPositions * kv_dim);
  for (long i = 0; i < kPositions * kv_dim; ++i) {
    cpu::from_float(0.5f * std::sin(0.37f * static_cast<float>(i)), k[i]);
    cpu::from_float(0.5f * std::cos(0.11f * static_cast<float>(i)), v[i]);
  }
  std::vector<int> pages(kPositions / kBlock);
  std::iota(pages.begin(), pages.end(), 0);
  const cpu::PagedRows<T> rows{k.data(), v.data(), pages.data(), kBlock, kv_dim};
  const cpu::AttendShape sh{n_kv_heads, heads, head_dim};
  // The prefix pass's choice of loops for this width (cpu::attend_batch_shared_prefix).
  const auto span = cpu::product_pays(heads) ? cpu::attend_span_product<T, cpu::PagedRows<T>>
                                             : cpu::attend_span<T, cpu::PagedRows<T>>;
  const double call_flops = static_cast<double>(kPositions) * sh.n_heads() * 4.0 * head_dim;
  const long reps = std::clamp(static_cast<long>(std::ceil(kRunFlops / call_flops)), 1L, 100000L);
  double best = 0;
  for (int run = 0; run < kRuns; ++run) {
    std::chrono::steady_clock::time_point t0;
    double seconds = 0;
    int threads = 1;
#pragma omp parallel
    {
      std::vector<float> q(sh.q_dim()), acc(sh.q_dim()), mx(sh.n_heads()), sum(sh.n_heads());
      std::vector<float> scratch(std::max(cpu::attend_span_scratch_floats(sh.n_heads(), head_dim),
                                          cpu::attend_product_scratch_floats(heads, head_dim)));
      for (std::size_t i = 0; i < q.size(); ++i) q[i] = 0.3f * std::sin(0.23f * i);
      const auto call = [&] {
        span(q.data(), rows, 0, kPositions, sh, 0, n_kv_heads, acc.data(), mx.data(), sum.data(),
             scratch.data());
      };
      call();  // warm: the rows into this core's cache
#pragma omp barrier
#pragma omp single
      {
        threads = omp_get_num_threads();  // the team granted, which may be fewer than asked for
        t0 = std::chrono::steady_clock::now();
      }
      for (long r = 0; r < reps; ++r) call();
#pragma omp barrier
#pragma omp single
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    best = std::max(best, threads * static_cast<double>(reps) * call_flops / seconds);
  }
  return best;
}

}  // namespace

CpuAttendRates::CpuAttendRates(int n_kv_heads, int head_dim, DType kv, int group) : group_(group) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int> widths = {group};
  for (int k = 2; k <= kMostHeads; k *= 2) widths.push_back(k);
  cpu::with_kv_type(kv, [&](auto tag) {
    for (int k : widths)
      if (!measured_.contains(k))
        measured_[k] = measure_rate<decltype(tag)>(n_kv_heads, head_dim, k);
  });
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double CpuAttendRates::flops_per_s(int heads) const {
  if (heads == group_) return measured_.at(group_);
  int k = 2;
  while (k * 2 <= std::min(heads, kMostHeads)) k *= 2;
  return measured_.at(k);
}

}  // namespace kvheap
