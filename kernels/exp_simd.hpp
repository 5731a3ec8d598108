// The exponential of the CPU's softmaxes and draws: exp(d) for a vector of d <= 0, the only inputs
// they have (a score minus the largest score, a logit minus the largest logit).
//
// Eigen's exp serves every float: it clamps both ends and rounds n and converts it to build 2^n,
// 19 vector instructions on AVX-512 with Eigen 3.4. With d <= 0 and results below the smallest
// normal float wanted as 0, fewer do. d = n ln 2 + r, n the nearest whole number to d / ln 2, and
// ln 2 in two parts, the first with few enough bits that n ln 2 is exact; exp(r) for |r| <= ln 2 /
// 2 by a polynomial of degree 6 (a minimax fit in double precision, its coefficients rounded to
// float: 2.9e-8 relative error at most over that interval, half a float's rounding); then 2^n.
// - With AVX-512, on 16 floats (every caller's width there), n comes from one rounding instruction,
//   2^n and the zeros below the smallest normal from one vscalefps under a mask: 12 instructions,
//   9 of them multiplies and multiply-adds.
// - Elsewhere (GCC's vector extension), n comes from adding 1.5 x 2^23 and 2^n from its bits
//   shifted into a float's exponent: 16 instructions a vector register. A vector wider than the
//   target's registers is taken half by half: whole, GCC would run its selects lane by lane.
// Both are within 2 ulp of exp (tests/kernels/test_exp_simd.cpp: 1.13 at most where the compiler
// fuses the multiply-adds, 1.44 where it does not), give 0 for d below ln(FLT_MIN) and for -inf,
// and keep NaN, so that a NaN score still shows in attention's output. bench_sampling times it in
// the draws.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <bit>
#include <limits>
#include <type_traits>

namespace kvheap::cpu::simd {

namespace detail {

/// exp(r) ~ 1 + c[0] r + c[1] r^2 + ... + c[5] r^6 over |r| <= ln 2 / 2: a Remez exchange in
/// double precision for the least largest relative error, rounded to float (c[0], 1.00000005
/// there, rounds to 1).
inline constexpr float kExpPoly[6] = {1.0f,          0.5000000434f,   0.1666636544f,
                                      0.0416647773f, 0.008379011162f, 0.001406124041f};
/// ln 2 = kLn2Hi + kLn2Lo: the top 9 bits, so that n kLn2Hi is exact for |n| < 2^15, and the rest.
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kLog2E = 1.44269504088896341f;
/// The smallest float whose exp is a normal float: exp of the next float down is below FLT_MIN.
inline constexpr float kLnMinNormal = -87.33654022216797f;
/// Bytes of the target's vector registers.
#if defined(__AVX512F__)
inline constexpr int kRegisterBytes = 64;
#elif defined(__AVX__)
inline constexpr int kRegisterBytes = 32;
#else
inline constexpr int kRegisterBytes = 16;
#endif

/// 1 + r + ... by Horner's rule: six multiply-adds.
template <class V>
inline V exp_poly(V r) {
  V q = V{} + kExpPoly[5];
  for (int i = 4; i >= 0; --i) q = q * r + kExpPoly[i];
  return q * r + 1.0f;
}

/// The portable path of exp_nonpositive, on one register's width or less: n from adding 1.5 x
/// 2^23, 2^n from its bits.
template <class V>
inline V exp_portable(V d) {
  using W = decltype(d < d);  // 32-bit integers, as many as V has floats
  // Clamped at -88, below which every result is 0 anyway, so that n + 127 stays in [0, 127]; NaN
  // compares false and stays NaN.
  const V z = d < -88.0f ? V{} - 88.0f : d;
  // Adding 1.5 x 2^23 rounds to a whole number: t holds n + 127 in its low bits.
  const V magic = V{} + (12582912.0f + 127.0f);
  const V t = z * kLog2E + magic;
  const V n = t - magic;
  const V r = n * -kLn2Lo + (n * -kLn2Hi + z);
  // 2^n: n + 127 into the exponent's bits (n = -127 gives the bits of 0); the magic's bits shift
  // out at the top, which C++20 defines for signed integers too.
  const V p = exp_poly(r) * std::bit_cast<V>(std::bit_cast<W>(t) << 23);
  return p < std::numeric_limits<float>::min() ? V{} : p;  // NaN compares false: kept
}

}  // namespace detail

/// \brief exp(d) lane by lane for d <= 0, within 2 ulp; 0 where exp(d) is below the smallest
/// normal float and for -inf; NaN for NaN. V is a GCC vector of 4, 8 or 16 floats (Vec8, Vec16,
/// an Eigen or intrinsics packet).
template <class V>
inline V exp_nonpositive(V d) {
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(d[0])>, float>, "a vector of floats");
  using namespace detail;
  if constexpr (static_cast<int>(sizeof(V)) > kRegisterBytes) {
    // Half by half, each in registers.
    if constexpr (sizeof(V) == 64) {
      const auto lo = exp_nonpositive(__builtin_shufflevector(d, d, 0, 1, 2, 3, 4, 5, 6, 7));
      const auto hi = exp_nonpositive(__builtin_shufflevector(d, d, 8, 9, 10, 11, 12, 13, 14, 15));
      return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    } else {
      static_assert(sizeof(V) == 32, "4, 8 or 16 floats");
      const auto lo = exp_nonpositive(__builtin_shufflevector(d, d, 0, 1, 2, 3));
      const auto hi = exp_nonpositive(__builtin_shufflevector(d, d, 4, 5, 6, 7));
      return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
    }
  } else {
#if defined(__AVX512F__)
    if constexpr (sizeof(V) == 64) {
      const __m512 x = std::bit_cast<__m512>(d);
      // Unordered-or-not-less: NaN passes the mask, and its n and r make the result NaN.
      const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kLnMinNormal), _CMP_NLT_UQ);
      // Zero-masked with every lane kept: the same instruction as the unmasked form, which GCC 12's
      // header builds from _mm512_undefined_ps and then warns of at -O1 (-Wuninitialized).
      const V n = std::bit_cast<V>(
          _mm512_maskz_roundscale_ps(0xFFFF, std::bit_cast<__m512>(d * kLog2E),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      const V r = n * -kLn2Lo + (n * -kLn2Hi + d);
      return std::bit_cast<V>(_mm512_maskz_scalef_ps(normal, std::bit_cast<__m512>(exp_poly(r)),
                                                     std::bit_cast<__m512>(n)));
    }
#endif
    return exp_portable(d);
  }
}

}  // namespace kvheap::cpu::simd
