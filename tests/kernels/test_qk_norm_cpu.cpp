// The CPU per-head q/k RMSNorm (kernels/qk_norm.hpp) against values worked out by hand: each head
// is normalised on its own, over head_dim values, with its own tensor's gain.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/qk_norm.hpp"

namespace kvheap {
namespace {

// One row, two q heads and one k head of head_dim 4. The second q head is the first times 2: an
// RMSNorm of its own cancels the factor, so both come out equal, where a norm over the whole row
// (both heads at once) would leave the second twice the first.
TEST(QkNormCpu, NormalisesEachHeadOnItsOwnWithItsTensorsGain) {
  std::vector<float> q = {1, 2, 3, 4, 2, 4, 6, 8};
  std::vector<float> k = {0, 0, 3, 4};
  const std::vector<float> q_gain = {1.0f, 2.0f, 0.5f, 1.0f};
  const std::vector<float> k_gain = {1.0f, 1.0f, 1.0f, 3.0f};
  const float eps = 1e-6f;
  cpu::qk_norm(q.data(), k.data(), q_gain.data(), k_gain.data(), 1, 2, 1, 4, eps);

  // q head: mean of squares (1 + 4 + 9 + 16) / 4 = 7.5; k head: (9 + 16) / 4 = 6.25.
  const double sq = 1.0 / std::sqrt(7.5 + eps), sk = 1.0 / std::sqrt(6.25 + eps);
  const std::vector<double> want_q = {1 * sq, 2 * 2 * sq, 0.5 * 3 * sq, 4 * sq};
  const std::vector<double> want_k = {0.0, 0.0, 3 * sk, 3 * 4 * sk};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(q[i], want_q[i], 1e-6) << "q head 0, element " << i;
    EXPECT_NEAR(q[4 + i], want_q[i], 1e-6) << "q head 1, element " << i;
    EXPECT_NEAR(k[i], want_k[i], 1e-6) << "k head 0, element " << i;
  }
}

// eps keeps an all-zero head (a zero projection row) finite instead of 0 / 0.
TEST(QkNormCpu, AZeroHeadStaysZero) {
  std::vector<float> q(8, 0.0f), k(8, 0.0f);
  const std::vector<float> gain(8, 1.0f);
  cpu::qk_norm(q.data(), k.data(), gain.data(), gain.data(), 1, 1, 1, 8, 1e-6f);
  for (float x : q) EXPECT_EQ(x, 0.0f);
  for (float x : k) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace kvheap
