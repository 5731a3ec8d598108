// Host-side conversions between fp32 and the two 16-bit float formats checkpoints ship in.
//
// fp16 (IEEE binary16): 1 sign, 5 exponent, 10 mantissa bits. bf16: the top 16 bits of an fp32,
// so it keeps fp32's range with only 7 mantissa bits. Loaders widen both to fp32; the writers in
// tests and the GPU path narrow fp32 with round-to-nearest-even, the rounding hardware uses, so a
// value narrowed here equals the one a CUDA kernel would store.
//
// Written with integer bit manipulation (std::bit_cast) rather than _Float16 or <stdfloat>, so it
// behaves the same on every compiler and needs no F16C instructions.
#pragma once

#include <bit>
#include <cstdint>

namespace kvheap {

/// \brief Widens an IEEE binary16 bit pattern to fp32. Exact: every fp16 value, subnormals,
/// infinities and NaN payloads included, is representable in fp32.
inline float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {
    // Infinity (mant == 0) or NaN; shifting the payload up keeps a NaN a NaN.
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  }
  if (exp == 0) {
    // Zero or subnormal: the value is mant x 2^-24, which fp32 holds exactly as a normal number.
    const float magnitude = static_cast<float>(mant) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
  // Normal: rebias the exponent from 15 to 127 and widen the mantissa from 10 to 23 bits.
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// \brief Narrows fp32 to an IEEE binary16 bit pattern, rounding to nearest, ties to even.
///
/// Magnitudes of 65520 and above (halfway past the largest fp16, 65504) become infinity;
/// magnitudes at or below 2^-25 (half the smallest subnormal) become a signed zero. NaN stays NaN.
inline std::uint16_t float_to_fp16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fffffffu;

  if (abs >= 0x7f800000u) {  // infinity or NaN
    if (abs == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
    // Keep the top payload bits; if they are all zero, set the quiet bit so it is still a NaN.
    const auto payload = static_cast<std::uint16_t>((abs >> 13) & 0x3ffu);
    return static_cast<std::uint16_t>(sign | 0x7c00u | (payload != 0 ? payload : 0x200u));
  }
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (abs <= 0x33000000u) return sign;  // <= 2^-25: zero (the tie at 2^-25 goes to even 0)

  const std::uint32_t biased_exp = abs >> 23;
  if (biased_exp >= 113) {
    // Normal result: drop 13 mantissa bits. A carry out of the mantissa correctly bumps the
    // exponent (1.111..1 x 2^e rounds to 1.0 x 2^(e+1)).
    std::uint32_t h = ((biased_exp - 112u) << 10) | ((abs & 0x7fffffu) >> 13);
    const std::uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  // Subnormal result: the value in units of 2^-24 is the 24-bit significand shifted right by
  // 126 - biased_exp (14..24 here). Rounding up from 1023 units gives 0x400, the smallest normal.
  const std::uint32_t significand = (abs & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - biased_exp;
  std::uint32_t h = significand >> shift;
  const std::uint32_t rest = significand & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

/// \brief Widens a bf16 bit pattern to fp32 (exact: bf16 is the upper half of an fp32).
inline float bf16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

/// \brief Narrows fp32 to bf16, rounding to nearest, ties to even. Values past the largest bf16
/// round to infinity; NaN stays NaN.
inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    // NaN: keep the upper payload bits (so bf16 -> fp32 -> bf16 is exact); if they are all zero,
    // set the quiet bit so the result is still a NaN rather than infinity.
    const auto hi = static_cast<std::uint16_t>(x >> 16);
    return (hi & 0x7fu) != 0 ? hi : static_cast<std::uint16_t>(hi | 0x40u);
  }
  // Adding 0x7fff rounds up anything past the halfway point; adding the kept lowest bit as well
  // turns an exact tie into a round up only when that bit is odd.
  const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

}  // namespace kvheap
