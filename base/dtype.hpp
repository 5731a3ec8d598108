// DType: the element types of weights and KV storage, and their names on the command line.
#pragma once

#include <cstddef>
#include <string_view>

namespace kvheap {

/// \brief Element types for weights and KV storage.
enum class DType { F32, F16, BF16 };

/// \brief Bytes per element of a dtype.
[[nodiscard]] std::size_t dtype_size(DType t);
/// \brief "fp32", "fp16", "bf16".
[[nodiscard]] std::string_view dtype_name(DType t);
/// \brief Parses "fp32"/"f32"/"float32", "fp16"/"f16"/"float16", "bf16"/"bfloat16"; throws
/// UsageError otherwise.
[[nodiscard]] DType parse_dtype(std::string_view s);

}  // namespace kvheap
