// RoPE inverse frequencies for a model, including Llama 3 frequency scaling.
#pragma once

#include <vector>

#include "common/model/model_config.hpp"

namespace kvheap {

/// \brief inv_freq[head_dim/2]: theta^(-2i/head_dim), divided by rope_freq_factors when the
/// config has them, stretched per llama3 rope_scaling if set.
std::vector<float> rope_inv_freq(const ModelConfig& c);

}  // namespace kvheap
