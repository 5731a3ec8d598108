// The oracle: the whole sequence recomputed with full causal attention and no cache at all.
#pragma once

#include <span>
#include <vector>

#include "common/model/weights.hpp"

namespace kvheap {

/// \brief Logits [tokens.size(), vocab_size] of every position, computed by running the whole
/// sequence at once with attention written out directly over this call's own K and V.
///
/// Deliberately independent of KVCache and of the attention kernel: single-threaded loops over
/// plain arrays, so that every cache policy can be checked against it. Token i sits at position
/// first_pos + i; attention still sees only these tokens, so a nonzero first_pos places the same
/// text later in the context, which RoPE makes invisible up to rounding (tests use that).
std::vector<float> reference_logits(const ModelWeights& w, std::span<const int> tokens,
                                    int first_pos = 0);

}  // namespace kvheap
