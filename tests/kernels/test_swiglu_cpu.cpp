// The CPU SwiGLU (kernels/swiglu_cpu.cpp): silu(gate) * up against double precision, on lengths
// that end inside a vector and inside a piece of work, on one thread and on several, and at the
// values where the exponential overflows or underflows.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu_threads.hpp"
#include "kernels/swiglu.hpp"

namespace kvheap {
namespace {

TEST(SwigluCpu, MatchesDoublePrecisionWithinFourRoundings) {
  static_assert(cpu::kParallelElements <= 70001, "the longest case runs on threads");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> wide(-30.0f, 30.0f), unit(-2.0f, 2.0f);
  for (const long count : {1L, 15L, 17L, 4095L, 4097L, 70001L})
    for (const int threads : {1, 2}) {
      std::vector<float> gate(static_cast<std::size_t>(count)), up(gate.size());
      for (std::size_t i = 0; i < gate.size(); ++i) {
        gate[i] = i % 2 ? wide(rng) : unit(rng);
        up[i] = unit(rng);
      }
      std::vector<float> got = gate;
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      cpu::swiglu(got.data(), up.data(), count);
      omp_set_num_threads(saved);
      for (std::size_t i = 0; i < gate.size(); ++i) {
        const double g = gate[i];
        const double want = g / (1.0 + std::exp(-g)) * up[i];
        // Each of the exponential, the sum, the quotient and the product rounds once in fp32;
        // a wrong sign, a dropped factor or an element left out is off by far more.
        ASSERT_NEAR(got[i], want, 4 * 0x1p-24 * std::fabs(want) + 1e-37)
            << "element " << i << " of " << count << " (gate " << gate[i] << ", up " << up[i]
            << ") on " << threads << " threads";
      }
    }
}

TEST(SwigluCpu, OverflowAndUnderflowGiveTheLimits) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> gate = {200.0f, -200.0f, 0.0f,
                             -0.0f,  89.0f,   -80.0f,
                             kInf,   -kInf,   std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> up(gate.size(), 3.0f);
  cpu::swiglu(gate.data(), up.data(), static_cast<long>(gate.size()));
  EXPECT_EQ(gate[0], 600.0f);  // silu(x) = x once e^-x is below half an ulp of 1
  EXPECT_EQ(gate[1], 0.0f);    // x / (1 + e^200) = x / inf
  EXPECT_EQ(gate[2], 0.0f);
  EXPECT_EQ(gate[3], 0.0f);
  EXPECT_EQ(gate[4], 267.0f);
  const double tiny = -80.0 * 3.0 / (1.0 + std::exp(80.0));  // about -4.3e-33, still normal
  EXPECT_NEAR(gate[5], tiny, 4 * 0x1p-24 * std::fabs(tiny));
  EXPECT_EQ(gate[6], kInf);
  EXPECT_TRUE(std::isnan(gate[7]));  // -inf / (1 + inf), as std::exp gives it
  EXPECT_TRUE(std::isnan(gate[8]));
}

}  // namespace
}  // namespace kvheap
