#include "base/dtype.hpp"

#include <string>

#include "base/error.hpp"

namespace kvheap {

std::size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "f32" || s == "float32") return DType::F32;
  if (s == "fp16" || s == "f16" || s == "float16") return DType::F16;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  throw UsageError("unknown dtype '" + std::string(s) + "': expected fp32, fp16 or bf16");
}

}  // namespace kvheap
