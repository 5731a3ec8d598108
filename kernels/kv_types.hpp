// The element types a CPU KV cache stores (fp32, or fp16/bf16 bits), and their conversions.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"
#include "base/half.hpp"

namespace kvheap::cpu {

/// \brief Storage element of the KV cache: float, or raw fp16/bf16 bits.
struct F16Bits {
  std::uint16_t bits;  ///< IEEE binary16 bit pattern
};
/// \brief bf16 bits stored in the KV cache.
struct BF16Bits {
  std::uint16_t bits;  ///< bfloat16 bit pattern (the top half of an fp32)
};

/// \brief Widens a stored KV element to fp32.
inline float to_float(float v) { return v; }
/// \copydoc to_float(float)
inline float to_float(F16Bits v) { return fp16_to_float(v.bits); }
/// \copydoc to_float(float)
inline float to_float(BF16Bits v) { return bf16_to_float(v.bits); }
/// \brief Rounds fp32 to the KV storage type (round to nearest even).
inline void from_float(float x, float& out) { out = x; }
/// \copydoc from_float(float, float&)
inline void from_float(float x, F16Bits& out) { out.bits = float_to_fp16(x); }
/// \copydoc from_float(float, float&)
inline void from_float(float x, BF16Bits& out) { out.bits = float_to_bf16(x); }

/// \brief Calls `f(T{})` with T the storage element of KV dtype `t` (float, F16Bits or BF16Bits),
/// so a cache policy writes its type-generic code once.
template <class F>
void with_kv_type(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::F16: f(F16Bits{}); break;
    case DType::BF16: f(BF16Bits{}); break;
  }
}

}  // namespace kvheap::cpu
