// Synthetic weights: a deterministic model from (config, seed), for tests, benchmarks and the tour.
#pragma once

#include <cstdint>

#include "common/model/weights.hpp"

namespace kvheap {

/// \brief Builds every tensor of `config` from a counter-based hash of (seed, tensor, index).
///
/// Values are uniform and scaled by 1/sqrt(fan_in) so activations keep unit scale through the
/// layers, and the embedding is scaled so logits spread over a few units: sampling and greedy
/// decoding then see varied, non-degenerate distributions. Generation is parallel and the result
/// does not depend on the thread count.
ModelWeights make_synthetic_weights(const ModelConfig& config, std::uint64_t seed);

}  // namespace kvheap
