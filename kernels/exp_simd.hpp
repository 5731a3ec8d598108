// The exponential of the CPU's softmaxes and draws: exp(d) for a vector of d <= 0, the only inputs
// they have (a score minus the largest score, a logit minus the largest logit). exp_nonpositive
// serves the softmaxes; the draws' exp_product, at the end, takes d as a product a c that it does
// not round first, and on AVX-512 builds 2^y from a table.
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
// and keep NaN, so that a NaN score still shows in attention's output.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>
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

/// \brief What exp_product needs of one factor c > 0: c itself, c log2(e) (octaves per unit of a)
/// split into two floats so that a times it is never rounded, and the smallest a whose exp(a c) is
/// a normal float.
struct ProductExp {
  float c = 0;           ///< the factor
  float octaves_hi = 0;  ///< c log2(e) rounded to a float
  float octaves_lo = 0;  ///< the rest of c log2(e): hi + lo is it to 2^-48
  float a_min = 0;       ///< the smallest float a with a (hi + lo) >= -126
  bool split = false;    ///< c log2(e) is below the largest float
};

/// \brief ProductExp of c > 0 (for a draw, c = 1 / T). Where c log2(e) is beyond the largest float
/// (c above 2.36e38: a temperature below 4.24e-39) or below 2^-100 (c below 5.5e-31: a temperature
/// above 1.8e30), exp_product rounds the product first.
inline ProductExp product_exp(float c) {
  ProductExp k;
  k.c = c;
  const double octaves = static_cast<double>(c) * std::numbers::log2e;
  // Below 2^-100 octaves the low part would lose bits to the subnormals; c <= 0 and NaN have no
  // a_min.
  k.split = c > 0 && octaves < std::numeric_limits<float>::max() && octaves >= 0x1p-100;
  if (!k.split) return k;
  k.octaves_hi = static_cast<float>(octaves);
  k.octaves_lo = static_cast<float>(octaves - k.octaves_hi);
  const double per_a = static_cast<double>(k.octaves_hi) + k.octaves_lo;
  // -126 / per_a rounded to a float, then stepped to the smallest a that still reaches -126
  // (products in double, exact to 2^-48 of them).
  float a = static_cast<float>(-126.0 / per_a);
  const float down = -std::numeric_limits<float>::infinity();
  while (static_cast<double>(a) * per_a < -126.0) a = std::nextafter(a, 0.0f);
  while (static_cast<double>(std::nextafter(a, down)) * per_a >= -126.0)
    a = std::nextafter(a, down);
  k.a_min = a;
  return k;
}

/// \brief exp_product computes its product exactly where this is true (with AVX-512, on vectors of
/// 16 floats), unless product_exp(c) could not split c log2(e). Elsewhere it is exp_nonpositive(a *
/// c), a * c rounded to a float first.
#if defined(__AVX512F__)
inline constexpr bool kExactProduct = true;
#else
inline constexpr bool kExactProduct = false;
#endif

namespace detail {
#if defined(__AVX512F__)
/// 2^(j / 32) rounded to a float, j = 0..31: exp_product's table.
alignas(64) inline constexpr float kExp2Table[32] = {
    0x1p+0f,        0x1.059b0ep+0f, 0x1.0b5586p+0f, 0x1.11301ep+0f, 0x1.172b84p+0f, 0x1.1d4874p+0f,
    0x1.2387a6p+0f, 0x1.29e9ep+0f,  0x1.306fep+0f,  0x1.371a74p+0f, 0x1.3dea64p+0f, 0x1.44e086p+0f,
    0x1.4bfdaep+0f, 0x1.5342b6p+0f, 0x1.5ab07ep+0f, 0x1.6247ecp+0f, 0x1.6a09e6p+0f, 0x1.71f75ep+0f,
    0x1.7a1148p+0f, 0x1.82589ap+0f, 0x1.8ace54p+0f, 0x1.93737cp+0f, 0x1.9c4918p+0f, 0x1.a5503cp+0f,
    0x1.ae89fap+0f, 0x1.b7f77p+0f,  0x1.c199bep+0f, 0x1.cb720ep+0f, 0x1.d5818ep+0f, 0x1.dfc974p+0f,
    0x1.ea4afap+0f, 0x1.f50766p+0f,
};
/// 2^f - 1 ~ f (kExp2Poly[0] + kExp2Poly[1] f) over |f| <= 1/64 (and the 2^-17 more that n from a
/// (hi) alone can leave): the coefficients of least largest relative error, found by search
/// in double precision and rounded to float: 5.4e-8 at most, 0.9 of float's unit in the last place.
inline constexpr float kExp2Poly[2] = {0.6931573152542114f, 0.24022650718688965f};
#endif
}  // namespace detail

/// \brief exp(a c) lane by lane for a <= 0 (k = product_exp(c)), within 2 ulp of exp of the exact
/// product where kExactProduct, else of exp(a * c rounded); 0 where exp(a c) is below the smallest
/// normal float and for -inf; NaN for NaN. The CPU draw's p = exp((logit - best) / T).
///
/// With AVX-512, on 16 floats: y = a c log2(e) = n + f, n a multiple of 1/32 and |f| <= 1/64.
/// Adding 1.5 x 2^18 to a (hi) rounds it to n, whose last five bits index the table of 2^(n mod 1);
/// f is then a (hi) - n + a (lo), two multiply-adds, so that the product is not rounded before the
/// exponential (f is, to 2^-31 of an octave); 2^f from a
/// polynomial of degree 2; 2^floor(n) from vscalefps, which zeroes the lanes below a_min under a
/// mask. 10 instructions, 6 of them multiplies and multiply-adds, where exp_nonpositive of the
/// product rounded first takes 13, 10 of them.
template <class V>
inline V exp_product(V a, const ProductExp& k) {
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(a[0])>, float>, "a vector of floats");
#if defined(__AVX512F__)
  if constexpr (sizeof(V) == 64) {
    using namespace detail;
    if (!k.split) return exp_nonpositive(a * k.c);
    const __m512 x = std::bit_cast<__m512>(a);
    const __m512 shift = _mm512_set1_ps(0x1.8p18f);  // t's last place is then 1/32
    const __m512 hi = _mm512_set1_ps(k.octaves_hi);
    const __m512 t = _mm512_fmadd_ps(x, hi, shift);
    const __m512 n = _mm512_sub_ps(t, shift);
    const __m512 f = _mm512_fmadd_ps(x, _mm512_set1_ps(k.octaves_lo), _mm512_fmsub_ps(x, hi, n));
    const __m512 q = _mm512_fmadd_ps(f, _mm512_set1_ps(kExp2Poly[1]), _mm512_set1_ps(kExp2Poly[0]));
    const __m512 low = _mm512_permutex2var_ps(_mm512_load_ps(kExp2Table), _mm512_castps_si512(t),
                                              _mm512_load_ps(kExp2Table + 16));
    const __m512 v = _mm512_fmadd_ps(low, _mm512_mul_ps(f, q), low);
    // Unordered-or-not-less: NaN passes the mask, and its t makes the result NaN.
    const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(k.a_min), _CMP_NLT_UQ);
    return std::bit_cast<V>(_mm512_maskz_scalef_ps(normal, v, n));
  }
#endif
  return exp_nonpositive(a * k.c);
}

}  // namespace kvheap::cpu::simd
