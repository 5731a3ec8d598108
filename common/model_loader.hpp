// One entry point for every model source: a preset name, a llama2.c .bin file, a GGUF file, or a
// Hugging Face safetensors folder.
#pragma once

#include <cstdint>
#include <string>

#include "common/weights.hpp"

namespace kvheap {

/// \brief Loads `spec`: a preset name gives synthetic weights from `seed`; a regular file is read
/// as a GGUF model when it starts with the GGUF magic, else as a llama2.c checkpoint; a directory
/// as a safetensors model. Throws InputError naming the spec and the accepted forms when it is
/// none of them.
ModelWeights load_model(const std::string& spec, std::uint64_t seed = 0);

/// \brief Throws InputError, naming `source`, the tensor, the value and its row and column, at the
/// first weight that is NaN or infinite: such a weight would make every logit NaN, found only
/// after a forward pass. load_model checks every checkpoint it reads.
void check_weights_finite(const ModelWeights& w, const std::string& source);

}  // namespace kvheap
