// Tests for the fp16/bf16 conversions the loaders and writers rely on: exhaustive round trips of
// every 16-bit pattern, and round-to-nearest-even at the cases where rounding is easy to get wrong
// (ties, the overflow threshold, subnormals, NaN).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "base/half.hpp"

namespace kvheap {
namespace {

float bits(std::uint32_t u) { return std::bit_cast<float>(u); }

bool is_fp16_nan(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool is_bf16_nan(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

TEST(Half, EveryFp16PatternSurvivesARoundTripThroughFloat) {
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const auto h16 = static_cast<std::uint16_t>(h);
    const float f = fp16_to_float(h16);
    EXPECT_EQ(std::isnan(f), is_fp16_nan(h16)) << std::hex << h;
    ASSERT_EQ(float_to_fp16(f), h16) << "pattern 0x" << std::hex << h << " -> " << f;
  }
}

TEST(Half, Fp16WidensToTheExactValue) {
  EXPECT_EQ(fp16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_float(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_float(0x7bff), 65504.0f);         // largest finite
  EXPECT_EQ(fp16_to_float(0x0400), 0x1p-14f);         // smallest normal
  EXPECT_EQ(fp16_to_float(0x0001), 0x1p-24f);         // smallest subnormal
  EXPECT_EQ(fp16_to_float(0x03ff), 1023 * 0x1p-24f);  // largest subnormal
  EXPECT_EQ(fp16_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(fp16_to_float(0x8000)));
  EXPECT_EQ(fp16_to_float(0x8000), 0.0f);
}

TEST(Half, FloatToFp16RoundsToNearestTiesToEven) {
  // 1 + 2^-11 lies exactly between 1 (0x3c00, even) and 1 + 2^-10 (0x3c01): goes down to even.
  EXPECT_EQ(float_to_fp16(1.0f + 0x1p-11f), 0x3c00);
  // 1 + 3 x 2^-11 lies between 0x3c01 and 0x3c02 (even): goes up.
  EXPECT_EQ(float_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
  // Just past a tie always rounds away from it.
  EXPECT_EQ(float_to_fp16(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3c01);
  EXPECT_EQ(float_to_fp16(std::nextafter(1.0f + 3 * 0x1p-11f, 0.0f)), 0x3c01);
  EXPECT_EQ(float_to_fp16(-(1.0f + 0x1p-11f)), 0xbc00);
  // A mantissa carry moves into the exponent: 2 - 2^-12 rounds up to 2.0 (0x4000).
  EXPECT_EQ(float_to_fp16(2.0f - 0x1p-12f), 0x4000);
}

TEST(Half, FloatToFp16OverflowsToInfinityPastHalfwayBeyondMax) {
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7bff);  // below the tie: stays finite
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);  // the tie: 0x7bff is odd, so it goes up to inf
  EXPECT_EQ(float_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(float_to_fp16(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_fp16(-std::numeric_limits<float>::infinity()), 0xfc00);
}

TEST(Half, FloatToFp16HandlesSubnormalsAndUnderflow) {
  EXPECT_EQ(float_to_fp16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16(-0x1p-24f), 0x8001);
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0x0000);                        // tie with 0: even 0
  EXPECT_EQ(float_to_fp16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);  // just past the tie
  EXPECT_EQ(float_to_fp16(3 * 0x1p-25f), 0x0002);                    // tie 1|2: even 2
  EXPECT_EQ(float_to_fp16(5 * 0x1p-25f), 0x0002);                    // tie 2|3: even 2
  EXPECT_EQ(float_to_fp16(0x1p-14f - 0x1p-25f), 0x0400);  // tie 0x3ff|0x400: up into the normals
  EXPECT_EQ(float_to_fp16(1e-10f), 0x0000);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_fp16(-1e-10f), 0x8000);  // the sign of an underflowed value survives
}

TEST(Half, NanStaysNanInBothDirections) {
  EXPECT_TRUE(is_fp16_nan(float_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_fp16_nan(float_to_fp16(-std::numeric_limits<float>::quiet_NaN())));
  // A payload only in the low 13 bits would vanish when truncated and leave infinity.
  EXPECT_TRUE(is_fp16_nan(float_to_fp16(bits(0x7f800001u))));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(bits(0x7f800001u))));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(bits(0xff800001u))));
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7fc0)));
}

TEST(Half, EveryBf16PatternSurvivesARoundTripThroughFloat) {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto b16 = static_cast<std::uint16_t>(b);
    const float f = bf16_to_float(b16);
    EXPECT_EQ(std::isnan(f), is_bf16_nan(b16)) << std::hex << b;
    ASSERT_EQ(float_to_bf16(f), b16) << "pattern 0x" << std::hex << b;
  }
}

TEST(Half, FloatToBf16RoundsToNearestTiesToEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(float_to_bf16(bits(0x3f808000u)), 0x3f80);  // tie, 0x3f80 even: down
  EXPECT_EQ(float_to_bf16(bits(0x3f818000u)), 0x3f82);  // tie, 0x3f81 odd: up to 0x3f82
  EXPECT_EQ(float_to_bf16(bits(0x3f808001u)), 0x3f81);  // past the tie: up
  EXPECT_EQ(float_to_bf16(bits(0x3f807fffu)), 0x3f80);  // before the tie: down
  EXPECT_EQ(float_to_bf16(bits(0xbf808000u)), 0xbf80);  // sign does not change the rule
  EXPECT_EQ(float_to_bf16(bits(0x3fffffffu)), 0x4000);  // mantissa carry into the exponent
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past max: inf
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_bf16(bits(0x00018000u)), 0x0002);  // subnormal tie, odd: up
}

}  // namespace
}  // namespace kvheap
