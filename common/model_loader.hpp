// One entry point for every model source: a preset name, a llama2.c .bin file, or a Hugging Face
// safetensors folder.
#pragma once

#include <cstdint>
#include <string>

#include "common/weights.hpp"

namespace kvheap {

/// \brief Loads `spec`: a preset name gives synthetic weights from `seed`; a regular file is read
/// as a llama2.c checkpoint; a directory as a safetensors model. Throws InputError naming the
/// spec and the three accepted forms when it is none of them.
ModelWeights load_model(const std::string& spec, std::uint64_t seed = 0);

}  // namespace kvheap
