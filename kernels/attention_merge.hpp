// Partial softmax states of attention and how to merge them (split-K / flash-decoding).
//
// Attention over positions [0, n) can be computed in independent chunks. Each chunk keeps
// three things: its largest score m, the sum of exp(score - m) over its positions, and the
// unnormalised output acc = sum exp(score - m) * v. Two chunks merge exactly by rescaling both to
// the larger maximum. The merge is associative and commutative up to rounding, so chunks can be
// combined in any tree; the final output is acc / sum.
#pragma once

#include <cmath>

#include "kernels/host_device.hpp"

namespace kvheap {

/// \brief Running maximum and exponential sum of one attention chunk (per query head).
struct SoftmaxState {
  float max = -INFINITY;  ///< largest score seen; -inf for an empty chunk
  float sum = 0.0f;       ///< sum of exp(score - max)
};

/// \brief Scale factors that bring two states to their common maximum.
struct MergeScales {
  float a;           ///< multiply the first chunk's sum and accumulator by this
  float b;           ///< multiply the second chunk's by this
  SoftmaxState out;  ///< the merged state
};

/// \brief Merges chunk states `x` and `y`; an empty chunk (max = -inf) contributes nothing.
KVHEAP_HD MergeScales merge_softmax(SoftmaxState x, SoftmaxState y) {
  MergeScales s;
  const float m = x.max > y.max ? x.max : y.max;
  if (m == -INFINITY) {  // both empty: avoid exp(-inf - -inf) = NaN
    s.a = 0.0f;
    s.b = 0.0f;
    s.out = SoftmaxState{};
    return s;
  }
  s.a = x.max == -INFINITY ? 0.0f : expf(x.max - m);
  s.b = y.max == -INFINITY ? 0.0f : expf(y.max - m);
  s.out.max = m;
  s.out.sum = fma_rn(y.sum, s.b, x.sum * s.a);  // one rounding order on every target
  return s;
}

/// \brief Merges chunk y into chunk x in place: state and head_dim-long accumulator.
/// \param acc_x [head_dim] unnormalised output of x, updated
/// \param acc_y [head_dim] unnormalised output of y
KVHEAP_HD void merge_partial(SoftmaxState& x, float* acc_x, SoftmaxState y, const float* acc_y,
                             int head_dim) {
  const MergeScales s = merge_softmax(x, y);
  for (int d = 0; d < head_dim; ++d) acc_x[d] = fma_rn(acc_y[d], s.b, acc_x[d] * s.a);
  x = s.out;
}

/// \brief Most chunks choose_num_splits picks.
inline constexpr int kMaxSplits = 64;

/// \brief How many chunks to split a context of `n_ctx` positions into so that `work_items` x
/// chunks blocks fill a device with `sm_count` multiprocessors, each holding `blocks_per_sm`
/// blocks of the kernel at once.
///
/// Flash-decoding pays off when there are fewer (sequence, KV head) work items than the device
/// has room for blocks: one block per item would leave SMs idle while each streams a long
/// context, and decode attention is bound by the loads in flight. The rule fills one wave, as many
/// blocks as are resident at once (sm_count x blocks_per_sm, from the occupancy of the kernel
/// that runs), never makes a chunk shorter than `min_chunk` positions (below it, writing and
/// merging a chunk's partial result costs more than its reads), and caps the split at
/// `max_splits`. Every count from 1 to max_splits can come out.
KVHEAP_HD int choose_num_splits(int work_items, int n_ctx, int sm_count, int blocks_per_sm,
                                int min_chunk, int max_splits = kMaxSplits) {
  if (work_items <= 0 || min_chunk <= 0) return 1;
  const long long resident =
      static_cast<long long>(sm_count) * (blocks_per_sm > 0 ? blocks_per_sm : 1);
  long long splits = resident / work_items;
  const int by_length = n_ctx / min_chunk;
  splits = splits < by_length ? splits : by_length;
  splits = splits < max_splits ? splits : max_splits;
  return splits > 1 ? static_cast<int>(splits) : 1;
}

}  // namespace kvheap
