// Loader for llama2.c checkpoints: the legacy headerless format (version 0) and the versioned
// "ak42" fp32 format (version 1).
//
// Both store fp32 tensors back to back with no per-tensor metadata, so the header is the only
// description of the file. The loader therefore checks the header before touching any tensor:
// the shape must be a plausible model and the file must be exactly as long as that shape implies.
// Tensors are then used in place from a read-only memory map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/model/model_config.hpp"
#include "common/model/weights.hpp"

namespace kvheap {

/// \brief First four bytes of a versioned llama2.c checkpoint: "ak42" read as a little-endian
/// uint32. Legacy version 0 files start straight with dim, which is never this large.
inline constexpr std::uint32_t kLlama2cMagic = 0x616b3432;
/// \brief Legacy header: seven int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
/// seq_len).
inline constexpr std::size_t kLlama2cV0HeaderBytes = 28;
/// \brief Version 1 header: magic, version, the seven int32, a shared-classifier byte, zero pad.
inline constexpr std::size_t kLlama2cV1HeaderBytes = 256;

/// \brief Exact size in bytes of a llama2.c checkpoint of shape `c` in format `version` (0 or 1).
///
/// Version 0 also stores two RoPE tables of [max_seq_len, head_dim/2] floats that modern readers
/// ignore. `c` must have passed validate(); the arithmetic is checked and throws InputError on
/// 64-bit overflow rather than wrapping to a small, plausible-looking size.
[[nodiscard]] std::uint64_t llama2c_file_size(const ModelConfig& c, int version);

/// \brief Loads a llama2.c checkpoint (version 0 or 1, detected by the magic) as fp32 weights that
/// point into a memory map of the file.
///
/// The config is named after the file stem, rotates interleaved RoPE pairs, and uses BOS = 1 as
/// both start and stop token, as llama2.c does. Throws InputError for a file that cannot be read,
/// an unsupported version, an impossible shape, or a size that does not match the header
/// (truncated, or trailing bytes the header does not account for).
[[nodiscard]] ModelWeights load_llama2c(const std::string& path);

}  // namespace kvheap
