// The CPU softmaxes' and draws' exponential (kernels/exp_simd.hpp) against exp in double
// precision, at 4, 8 and 16 floats: 16 take AVX-512's own instructions where the build has them;
// elsewhere a vector wider than the registers goes half by half through the portable path, which
// the narrower ones take whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <vector>

#include "kernels/exp_simd.hpp"

namespace kvheap {
namespace {

using Floats4 = float __attribute__((vector_size(4 * sizeof(float))));
using Floats8 = float __attribute__((vector_size(8 * sizeof(float))));
using Floats16 = float __attribute__((vector_size(16 * sizeof(float))));

/// f over d, a vector V at a time (the tail padded with 0).
template <class V, class F>
std::vector<float> over_vectors(const std::vector<float>& d, F f) {
  constexpr int kN = sizeof(V) / sizeof(float);
  std::vector<float> out(d.size());
  for (std::size_t i = 0; i < d.size(); i += kN) {
    V v{};
    const std::size_t n = std::min<std::size_t>(kN, d.size() - i);
    std::memcpy(&v, d.data() + i, n * sizeof(float));
    const V e = f(v);
    std::memcpy(out.data() + i, &e, n * sizeof(float));
  }
  return out;
}

/// exp_nonpositive over d, a vector V at a time.
template <class V>
std::vector<float> exp_all(const std::vector<float>& d) {
  return over_vectors<V>(d, [](V v) { return cpu::simd::exp_nonpositive(v); });
}

/// Every 997th float of [-110, 0) (most of them near 0, where n is 0), 2 million spread evenly over
/// the interval's values (every n of 2^n, about 13000 each), and the edges.
std::vector<float> inputs() {
  std::vector<float> d;
  for (auto bits = std::bit_cast<std::uint32_t>(-110.0f); bits > 0x80000000u; bits -= 997)
    d.push_back(std::bit_cast<float>(bits));
  constexpr int kEven = 2'000'000;
  for (int k = 0; k < kEven; ++k) d.push_back(static_cast<float>(-110.0 * k / kEven));
  // Around ln(FLT_MIN), where results turn to 0: 64 floats each side.
  auto bits = std::bit_cast<std::uint32_t>(-87.33654f) - 64;
  for (int k = 0; k < 128; ++k) d.push_back(std::bit_cast<float>(bits++));
  const float ninf = -std::numeric_limits<float>::infinity();
  for (const float e : {-1e30f, -std::numeric_limits<float>::max(), ninf, 0.0f, -0.0f,
                        std::numeric_limits<float>::quiet_NaN()})
    d.push_back(e);
  return d;
}

template <class V>
void expect_exp_within_2_ulp() {
  constexpr int kN = sizeof(V) / sizeof(float);
  const std::vector<float> d = inputs();
  const std::vector<float> p = exp_all<V>(d);
  const double kMin = std::numeric_limits<float>::min();
  double worst = 0;
  long checked = 0;
  for (std::size_t i = 0; i + 3 < d.size(); ++i) {  // the last three: 0, -0 and NaN, below
    const double want = std::exp(static_cast<double>(d[i]));
    if (want < kMin) {
      ASSERT_EQ(p[i], 0.0f) << "d " << d[i] << ", " << kN << " lanes";
      ASSERT_FALSE(std::signbit(p[i])) << "d " << d[i];
      continue;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    const double err = std::fabs(p[i] - want) / ulp;
    worst = std::max(worst, err);
    ++checked;
    ASSERT_LE(err, 2.0) << "d " << d[i] << ", " << kN << " lanes: " << p[i] << " against " << want;
  }
  const std::size_t n = d.size();
  EXPECT_EQ(p[n - 3], 1.0f);  // exp(0) and exp(-0): exactly 1
  EXPECT_EQ(p[n - 2], 1.0f);
  EXPECT_TRUE(std::isnan(p[n - 1])) << "NaN in, " << p[n - 1] << " out";  // kept, not zeroed
  EXPECT_GT(checked, 2'500'000);
  std::cout << "[ exp " << kN << (kN < 10 ? "     ] " : "    ] ") << checked << " values, at most "
            << worst << " ulp from exp\n";
}

// 1.13 ulp at most where the compiler fuses the multiply-adds, 1.44 where it does not (-O1, as in
// the sanitizer build); 2 is the sampler rule's bound (kernels/sample.hpp). It bites: with the
// polynomial's r^6 term dropped the worst is 41 ulp, with ln 2 in one part (n ln 2 rounded) 4.4
// fused and 68 unfused (over every 211th float of [-110, 0]).
TEST(ExpSimd, WithinTwoUlpOfExpZeroBelowTheSmallestNormalNaNKept4Lanes) {
  expect_exp_within_2_ulp<Floats4>();
}
TEST(ExpSimd, WithinTwoUlpOfExpZeroBelowTheSmallestNormalNaNKept8Lanes) {
  expect_exp_within_2_ulp<Floats8>();
}
TEST(ExpSimd, WithinTwoUlpOfExpZeroBelowTheSmallestNormalNaNKept16Lanes) {
  expect_exp_within_2_ulp<Floats16>();
}

/// exp_product(a, product_exp(c)) against exp(a c) in double, a over inputs(): within 2 ulp of the
/// exact product where the build computes it (AVX-512, 16 lanes), else of the product rounded.
template <class V>
void expect_exp_product_within_2_ulp(float c) {
  constexpr int kN = sizeof(V) / sizeof(float);
  constexpr bool kExact = cpu::simd::kExactProduct && kN == 16;
  // First 64 floats each side of where exp(a c) turns to 0 at this c (inputs() holds them for c 1
  // only), then inputs(), whose last three are 0, -0 and NaN.
  std::vector<float> a;
  const double ln_min = std::log(static_cast<double>(std::numeric_limits<float>::min()));
  auto bits = std::bit_cast<std::uint32_t>(static_cast<float>(ln_min / c)) - 64;
  for (int j = 0; j < 128; ++j) a.push_back(std::bit_cast<float>(bits++));
  const std::vector<float> rest = inputs();
  a.insert(a.end(), rest.begin(), rest.end());
  const cpu::simd::ProductExp k = cpu::simd::product_exp(c);
  const std::vector<float> p =
      over_vectors<V>(a, [&k](V v) { return cpu::simd::exp_product(v, k); });
  const double kMin = std::numeric_limits<float>::min();
  double worst = 0;
  for (std::size_t i = 0; i + 3 < a.size(); ++i) {  // the last three: 0, -0 and NaN, below
    const double exponent = kExact ? static_cast<double>(a[i]) * c : static_cast<double>(a[i] * c);
    const double want = std::exp(exponent);
    if (want < kMin) {
      ASSERT_EQ(p[i], 0.0f) << "a " << a[i] << ", c " << c << ", " << kN << " lanes";
      continue;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    const double err = std::fabs(p[i] - want) / ulp;
    worst = std::max(worst, err);
    ASSERT_LE(err, 2.0) << "a " << a[i] << ", c " << c << ", " << kN << " lanes: " << p[i]
                        << " against " << want;
  }
  const std::size_t n = a.size();
  EXPECT_EQ(p[n - 3], 1.0f);
  EXPECT_EQ(p[n - 2], 1.0f);
  EXPECT_TRUE(std::isnan(p[n - 1])) << "NaN in, " << p[n - 1] << " out";
  std::cout << "[ exp(a c) " << kN << (kN < 10 ? " ] " : "] ") << "c " << c << ": at most " << worst
            << " ulp from exp of the " << (kExact ? "exact" : "rounded") << " product\n";
}

// The draw's exponential of (logit - best) / T. With AVX-512, 1.73 ulp at most over these inputs;
// it bites: the polynomial's coefficients at their Taylor values (ln 2, ln^2 2 / 2) give 4.2 (over
// every 97th float of [-110, 0)), and the table's index one 32nd off, the product's low part left
// out, or a_min one float lower (at every factor) fail too.
TEST(ExpSimd, ExpOfAProductWithinTwoUlpOfTheExactProduct16Lanes) {
  for (const float c : {1.0f, 1.25f, 1 / 0.7f, 1 / 3.3f})
    expect_exp_product_within_2_ulp<Floats16>(c);
}
TEST(ExpSimd, ExpOfAProductWithinTwoUlpOfTheRoundedProduct8Lanes) {
  for (const float c : {1.0f, 1.25f}) expect_exp_product_within_2_ulp<Floats8>(c);
}

// ProductExp's a_min: the smallest a whose exp(a c) is a normal float, the product exact. Where c
// log2(e) overflows a float, or is too small for its low part to keep its bits, the product is
// rounded first, so that an a near 0 still gets its exp rather than 1 or 0; c <= 0 and NaN are not
// split either (and do not hang the search for a_min).
TEST(ExpSimd, ProductExpFindsTheLastNormalAndRoundsWhatItCannotSplit) {
  for (const float c : {0.0f, -1.0f, 1e-40f, std::numeric_limits<float>::quiet_NaN()})
    EXPECT_FALSE(cpu::simd::product_exp(c).split) << "c " << c;
  for (const float c : {1.0f, 1.25f, 1e-3f, 3e5f}) {
    const cpu::simd::ProductExp k = cpu::simd::product_exp(c);
    ASSERT_TRUE(k.split);
    const double per_a = static_cast<double>(k.octaves_hi) + k.octaves_lo;
    EXPECT_NEAR(per_a, c * 1.4426950408889634, c * 1.4426950408889634 * 1e-14);
    EXPECT_GE(static_cast<double>(k.a_min) * per_a, -126.0) << "c " << c;
    EXPECT_LT(static_cast<double>(std::nextafter(k.a_min, -1e30f)) * per_a, -126.0) << "c " << c;
  }
  const float big = std::numeric_limits<float>::max();
  const cpu::simd::ProductExp k = cpu::simd::product_exp(big);
  EXPECT_FALSE(k.split);
  Floats16 a{};
  a[1] = -std::numeric_limits<float>::min();  // a c = -4: exp(-4)
  a[2] = -1.0f;
  const Floats16 p = cpu::simd::exp_product(a, k);
  EXPECT_EQ(p[0], 1.0f);
  EXPECT_NEAR(p[1], std::exp(-4.0), 1e-6);
  EXPECT_EQ(p[2], 0.0f);
}

}  // namespace
}  // namespace kvheap
