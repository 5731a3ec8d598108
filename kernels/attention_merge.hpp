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

/// \brief How many chunks to split a context of `n_ctx` positions into so that
/// `work_items` x chunks blocks fill a device with `sm_count` multiprocessors.
///
/// Flash-decoding pays off when there are fewer (sequence, KV head) work items than the device
/// has SMs: one block per item would leave most SMs idle while each streams a long context. The
/// rule aims at about two blocks per SM, never makes a chunk shorter than `min_chunk` positions
/// (merging costs more than it saves below that), and caps the split at `max_splits`.
KVHEAP_HD int choose_num_splits(int work_items, int n_ctx, int sm_count, int min_chunk = 256,
                                int max_splits = 64) {
  if (work_items <= 0 || n_ctx <= min_chunk) return 1;
  const int target_blocks = 2 * sm_count;
  int splits = (target_blocks + work_items - 1) / work_items;
  const int by_length = n_ctx / min_chunk;
  splits = splits < by_length ? splits : by_length;
  splits = splits < max_splits ? splits : max_splits;
  return splits > 1 ? splits : 1;
}

}  // namespace kvheap
