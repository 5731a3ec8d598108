// The next token of each logit row on the device (twin: sample_cpu.cpp; the rule: sample.hpp).
// Two kernels, one block per job: greedy_kernel for every job (step 1), then draw_kernel for the
// jobs that draw (steps 2-4).
//
//   1. every job: a strided pass keeps each thread's best (value, index), second and max |x|; warps
//      merge them through shuffles, then warp 0 merges the warps'. The merge is a total order
//      (larger value, then lower index), so the result does not depend on who scanned what.
//   2. a draw: p = exp((x - best) / T) (0 below the smallest normal float) into the draw's
//      scratch row, and S, a block sum.
//   3. top_p < 1: tau by bisection over p's bits (p >= 0, so its bits order as p does): 30 steps
//      from [0, bits of 1.0], each a pass over the scratch row and a block sum. Then the mass above
//      tau and the ties at it, and k as in the rule.
//   4. the draw's walk, in index order: each thread takes a contiguous chunk; an exclusive scan of
//      the chunks' tie counts ranks the ties, one of their masses gives each chunk's start, and the
//      last chunk that starts at or before u * mass walks its own tokens.
//
// Every sum is a fixed tree over fixed partial sums, so a job gives the same token every run.
#include <cfloat>
#include <climits>

#include "base/error.hpp"
#include "device/cuda_compat.hpp"
#include "device/launch.hpp"
#include "kernels/block_sum.cuh"
#include "kernels/host_device.hpp"
#include "kernels/sample.hpp"

namespace kvheap::cuda {
namespace {

using detail::block_reduce;
using detail::kFullMask;
using detail::kWarpSize;
using detail::Max;
using detail::Plus;

constexpr int kMaxThreads = 512;  // a block's threads: 128 registers each fit the register file

/// One thread's or one warp's view of a row: what step 1 keeps.
struct RowStats {
  float best;    // largest value (-inf when none seen)
  int index;     // its index (INT_MAX when none seen: any real entry, -inf included, wins)
  float second;  // largest value but best's entry
  float max_abs;
  int nan;  // 1 when a NaN was seen
};

__device__ __forceinline__ void take(RowStats& s, float value, int index, float second) {
  if (value > s.best || (value == s.best && index < s.index)) {
    s.second = fmaxf(fmaxf(s.second, second), s.best);
    s.best = value;
    s.index = index;
  } else {
    s.second = fmaxf(s.second, fmaxf(value, second));
  }
}

__device__ __forceinline__ RowStats warp_merge(RowStats s) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float best = __shfl_xor_sync(kFullMask, s.best, offset);
    const int index = __shfl_xor_sync(kFullMask, s.index, offset);
    const float second = __shfl_xor_sync(kFullMask, s.second, offset);
    s.max_abs = fmaxf(s.max_abs, __shfl_xor_sync(kFullMask, s.max_abs, offset));
    s.nan |= __shfl_xor_sync(kFullMask, s.nan, offset);
    take(s, best, index, second);
  }
  return s;
}

/// Step 1 over `row`; every thread gets the block's result.
__device__ RowStats row_stats(const float* row, int vocab) {
  __shared__ RowStats warp_stats[32];
  RowStats s{-INFINITY, INT_MAX, -INFINITY, 0.0f, 0};
  for (int i = static_cast<int>(threadIdx.x); i < vocab; i += static_cast<int>(blockDim.x)) {
    const float v = row[i];
    if (isnan(v)) {
      s.nan = 1;
      continue;
    }
    s.max_abs = fmaxf(s.max_abs, fabsf(v));
    take(s, v, i, -INFINITY);
  }
  s = warp_merge(s);
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int n_warps = static_cast<int>(blockDim.x) / kWarpSize;
  if (lane == 0) warp_stats[warp] = s;
  __syncthreads();
  s = warp_merge(lane < n_warps ? warp_stats[lane] : RowStats{-INFINITY, INT_MAX, -INFINITY, 0, 0});
  __syncthreads();  // warp_stats may be written again only after every warp read it
  return s;
}

/// The sum of `v` over the threads before this one (thread order); every thread gets its own.
template <class T>
__device__ __forceinline__ T block_exclusive_scan(T v) {
  __shared__ T warp_totals[32];
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  T inclusive = v;
  for (int offset = 1; offset < kWarpSize; offset *= 2) {
    const T up = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  if (lane == kWarpSize - 1) warp_totals[warp] = inclusive;
  __syncthreads();
  T before = T(0);
  for (int w = 0; w < warp; ++w) before += warp_totals[w];  // in warp order, the same every run
  __syncthreads();
  return before + inclusive - v;
}

// Step 1 for every job, and the greedy token: one block a job, at most kMaxThreads threads (which
// ptxas is told, so that a block of them fits the register file).
__global__ void __launch_bounds__(kMaxThreads)
    greedy_kernel(SampledToken* out,        // [n_jobs]
                  const float* logits,      // [rows, vocab]
                  const SamplingJob* jobs,  // [n_jobs], or null: job j reads row j
                  int vocab) {
  const int row = jobs != nullptr ? jobs[blockIdx.x].row : static_cast<int>(blockIdx.x);
  const RowStats s = row_stats(logits + static_cast<long>(row) * vocab, vocab);
  if (threadIdx.x == 0)
    out[blockIdx.x] = {s.nan ? SampledToken::kNaNLogit : s.index, s.best, s.second, s.max_abs};
}

// Steps 2-4 for the jobs that draw, one block each, after greedy_kernel wrote their rows'
// statistics. No thread leaves early, and the bisection's 30 steps depend on the job only: a
// block with nothing to draw (a NaN or an infinity in its row) runs every step over no tokens. So
// every shuffle is in code the compiler sees all of a warp reach, and it calls no helper for them,
// around which ptxas would spill. One block per SM is all it is asked to fit: held to four of
// kMaxThreads (32 registers), ptxas spills on sm_90.
__global__ void __launch_bounds__(kMaxThreads, 1)
    draw_kernel(SampledToken* out,        // [n_jobs] greedy_kernel's; each draw's token replaced
                const float* logits,      // [rows, vocab]
                const SamplingJob* jobs,  // [n_jobs]
                const int* draws,         // [n_draws] the jobs that draw
                int vocab,
                float* scratch)  // [n_draws, vocab] the draws' p
{
  __shared__ int chosen;
  const int j = draws[blockIdx.x];
  const SamplingJob job = jobs[j];
  const float* row = logits + static_cast<long>(job.row) * vocab;
  const SampledToken stats = out[j];
  const bool finite =
      stats.token != SampledToken::kNaNLogit && stats.best != INFINITY && stats.best != -INFINITY;
  const int n = finite ? vocab : 0;  // the tokens this block draws from
  const float best = stats.best;

  // 2. p and S.
  float* p = scratch + static_cast<long>(blockIdx.x) * vocab;
  const float inv_t = job.inv_temperature;  // finite, from the host (sample.hpp)
  float local = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    float pi = expf(mul_rn(row[i] - best, inv_t));
    pi = pi < FLT_MIN ? 0.0f : pi;  // the rule's p: 0 below the smallest normal float
    p[i] = pi;
    local += pi;
  }
  const float sum = detail::block_sum(local);  // its barriers also publish p to the block

  // 3. tau, the mass above it, the ties at it, and k. top_p 1: every token is in (tau 0, k 0).
  // The few scalar steps on the sums are in double, as the host twin's: top_p * S and the tie
  // count k then round alike on both, even where the ties' mass meets top_p * S exactly.
  const bool cut = job.top_p < 1.0f;
  const double target = static_cast<double>(job.top_p) * sum;
  // mass(p >= bits lo) > target holds at lo = 0; the range has 2^30 values, so 30 halvings.
  unsigned lo = 0, hi = cut && n > 0 ? __float_as_uint(1.0f) : 0;
  const int steps = cut ? 30 : 0;  // the same in every thread of the block: one job
  for (int step = 0; step < steps; ++step) {
    const unsigned mid = lo + (hi - lo + 1) / 2;  // lo itself once the range is one value
    float part = 0.0f;
    for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x))
      part += __float_as_uint(p[i]) >= mid ? p[i] : 0.0f;
    const float mass_from_mid = detail::block_sum(part);
    if (lo < hi) {
      if (mass_from_mid > target)
        lo = mid;
      else
        hi = mid - 1;
    }
  }
  const float tau = cut ? __uint_as_float(lo) : 0.0f;
  float above = 0.0f;
  int ties = 0;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    above += p[i] > tau ? p[i] : 0.0f;
    ties += p[i] == tau ? 1 : 0;
  }
  const double mass_above = detail::block_sum(above);
  ties = max(block_reduce(ties, Plus{}, 0), 1);
  const int k = cut ? fewest_ties(target, mass_above, tau, ties) : 0;
  const double mass = cut ? mass_above + static_cast<double>(k) * tau : sum;
  const double goal = static_cast<double>(job.u) * mass;

  // 4. The walk: this thread's chunk [begin, end) of the row, in index order.
  if (threadIdx.x == 0) chosen = -1;  // published by the scans' barriers
  const int chunk = (n + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
  const int begin = min(n, static_cast<int>(threadIdx.x) * chunk);
  const int end = min(n, begin + chunk);
  int my_ties = 0;
  for (int i = begin; i < end; ++i) my_ties += (k > 0 && p[i] == tau) ? 1 : 0;
  // In the nucleus: p > tau, or a tie at tau among the first k by index (`ties_before` counts the
  // ties from the row's start).
  const int first_tie = block_exclusive_scan(my_ties);  // ties in the chunks before this one
  float my_mass = 0.0f;
  int ties_before = first_tie;
  for (int i = begin; i < end; ++i) {
    const float pi = p[i];
    const bool tie = k > 0 && pi == tau;
    if (pi > tau || (tie && ties_before < k)) my_mass += pi;
    ties_before += tie ? 1 : 0;
  }
  const float start = block_exclusive_scan(my_mass);
  const int walker = block_reduce(
      my_mass > 0.0f && start <= goal ? static_cast<int>(threadIdx.x) : -1, Max{}, INT_MIN);
  if (static_cast<int>(threadIdx.x) == walker) {
    double cdf = start;
    int last = -1;
    ties_before = first_tie;
    for (int i = begin; i < end; ++i) {
      const float pi = p[i];
      const bool tie = k > 0 && pi == tau;
      const bool in = pi > tau || (tie && ties_before < k);
      ties_before += tie ? 1 : 0;
      if (!in || !(pi > 0.0f)) continue;
      cdf += pi;
      last = i;
      if (goal < cdf) break;
    }
    chosen = last;
  }
  __syncthreads();
  if (threadIdx.x != 0 || stats.token == SampledToken::kNaNLogit) return;
  out[j].token =
      finite ? chosen : (best > 0 ? SampledToken::kInfLogit : SampledToken::kNoTokenAllowed);
}

}  // namespace

long sample_scratch_floats(int n_draws, int vocab) { return static_cast<long>(n_draws) * vocab; }

void sample_rows(SampledToken* out, const float* logits, int vocab, const SamplingJob* jobs,
                 int n_jobs, const int* draws, int n_draws, float* scratch, StreamHandle stream) {
  if (vocab < 1) throw InputError("sample_rows: a row of logits needs at least one entry");
  if (n_jobs <= 0) return;
  const dim3 threads(static_cast<unsigned>(detail::row_threads(vocab, kMaxThreads)));
  launch<greedy_kernel>(dim3(static_cast<unsigned>(n_jobs)), threads, 0, stream, out, logits, jobs,
                        vocab);
  if (n_draws > 0)
    launch<draw_kernel>(dim3(static_cast<unsigned>(n_draws)), threads, 0, stream, out, logits, jobs,
                        draws, vocab, scratch);
}

}  // namespace kvheap::cuda
