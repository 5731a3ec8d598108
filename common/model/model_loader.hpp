// One entry point for every model source: a preset name, a llama2.c .bin file, a GGUF file, or a
// Hugging Face safetensors folder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/model/weights.hpp"

namespace kvheap {

/// \brief Loads `spec` (after resolve_model_name): a preset name gives synthetic weights from
/// `seed`; a regular file is read
/// as a GGUF model when it starts with the GGUF magic, else as a llama2.c checkpoint; a directory
/// as a safetensors model. Throws InputError naming the spec and the accepted forms when it is
/// none of them.
ModelWeights load_model(const std::string& spec, std::uint64_t seed = 0);

/// \brief The names of the real models kvheap fetches (scripts/fetch-model.sh NAME): "smollm2".
[[nodiscard]] std::vector<std::string> fetched_model_names();

/// \brief `spec` itself, unless it is a fetched model's name and no file or folder of that name
/// exists here: then the model's file in $KVHEAP_MODELS_DIR or the model cache
/// (${XDG_CACHE_HOME:-~/.cache}/kvheap/models). Throws InputError naming both places and the
/// command that fetches it when the file is in neither.
[[nodiscard]] std::string resolve_model_name(const std::string& spec);

/// \brief Throws InputError, naming `source`, the tensor, the value and its row and column, at the
/// first weight that is NaN or infinite: such a weight would make every logit NaN, found only
/// after a forward pass. load_model checks every checkpoint it reads.
void check_weights_finite(const ModelWeights& w, const std::string& source);

}  // namespace kvheap
