// The tensor types of GGUF files (ggml's block formats) and their dequantization to fp32.
//
// A quantized tensor is a run of blocks along its rows: each block holds a scale (and for some
// types a minimum) and 32 or 256 small integers. kvheap computes in fp32 and teaches the KV cache,
// not weight quantization, so it widens every tensor once, at load. Each type's arithmetic is
// that of the reference dequantizer of the format's own project, operation for operation, so the
// fp32 values are the same bits (tests/common/test_gguf.cpp checks every type against it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvheap {

/// \brief ggml's tensor type ids, as GGUF stores them. Only the types kvheap reads are named;
/// ggml_type_name knows the others, so that a file using one is refused by name.
enum class GgmlType : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30,
};

/// \brief The layout of one tensor type: `block` values in `block_bytes` bytes.
struct GgmlTypeLayout {
  int block = 0;        ///< values a block holds
  int block_bytes = 0;  ///< bytes a block takes
};

/// \brief ggml's name of type id `type` ("Q4_K", "IQ2_XXS"), or "" for an id ggml never used.
[[nodiscard]] std::string ggml_type_name(std::uint32_t type);

/// \brief True when kvheap dequantizes type id `type`: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
/// Q8_0, Q4_K, Q5_K and Q6_K.
[[nodiscard]] bool ggml_type_supported(std::uint32_t type);

/// \brief The block layout of a supported type.
[[nodiscard]] GgmlTypeLayout ggml_type_layout(GgmlType type);

/// \brief Widens `n` values of type `type` at `src` (n / block blocks; n must be a multiple of the
/// block) into `dst`. Runs on the calling thread; load_gguf spreads tensors over threads.
void dequantize(GgmlType type, const std::byte* src, float* dst, std::size_t n);

}  // namespace kvheap
