// Loader for GGUF model files of the Llama, Qwen2 and Qwen3 architectures: the config from the
// `<arch>.*` keys, every tensor dequantized to fp32 (common/model/gguf_quants.hpp) on all threads.
//
// RoPE: llama.cpp's converter reorders the q and k rows of `llama` models so that RoPE rotates
// interleaved pairs (2i, 2i+1), as llama2.c does; `qwen2` and `qwen3` keep the Hugging Face order
// and rotate halves (i, i + head_dim/2). The loader records which, and the forward pass applies it.
#pragma once

#include <string>

#include "common/model/gguf_file.hpp"
#include "common/model/weights.hpp"

namespace kvheap {

/// \brief The architectures load_gguf serves, for messages: "llama, qwen2, qwen3".
[[nodiscard]] std::string gguf_architectures();

/// \brief The model config of `file`. Throws InputError naming the file and key for an
/// architecture kvheap does not serve, a missing required key (block count, embedding length,
/// head count, feed-forward length, RMS epsilon), a RoPE that does not rotate the whole head, a
/// rope scaling it does not apply, a vocabulary whose size disagrees with the embedding rows, and
/// a config that validate() refuses.
[[nodiscard]] ModelConfig gguf_config(const GgufFile& file);

/// \brief Loads a GGUF model file as fp32 weights, with rope_freqs.weight (Llama 3.1's RoPE
/// scaling) as the config's rope_freq_factors. Throws as gguf_config, and for a missing tensor,
/// one whose shape does not match the config (both named with the expected shape), a tensor the
/// model does not use, and factors that are not finite and positive.
[[nodiscard]] ModelWeights load_gguf(const std::string& path);

/// \brief True when `path` is a regular file that starts with the GGUF magic.
[[nodiscard]] bool is_gguf_file(const std::string& path);

}  // namespace kvheap
