// The log-sum-exp merge of partial attention states: exact against a one-pass softmax, associative,
// and safe with empty chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention_merge.hpp"

namespace kvheap {
namespace {

struct Partial {
  SoftmaxState state;
  std::vector<float> acc;
};

// One chunk computed directly from its scores and values.
Partial chunk(const std::vector<float>& scores, const std::vector<std::vector<float>>& v, int lo,
              int hi, int hd) {
  Partial p{{}, std::vector<float>(hd, 0.0f)};
  for (int t = lo; t < hi; ++t) p.state.max = std::max(p.state.max, scores[t]);
  for (int t = lo; t < hi; ++t) {
    const float e = std::exp(scores[t] - p.state.max);
    p.state.sum += e;
    for (int d = 0; d < hd; ++d) p.acc[d] += e * v[t][d];
  }
  return p;
}

struct Problem {
  std::vector<float> scores;
  std::vector<std::vector<float>> v;
};

Problem make_problem(int n, int hd, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  Problem p;
  for (int t = 0; t < n; ++t) {
    p.scores.push_back(nd(rng));
    std::vector<float> row(hd);
    for (auto& x : row) x = nd(rng);
    p.v.push_back(row);
  }
  return p;
}

TEST(AttentionMerge, SplitEqualsSinglePass) {
  const int n = 1000, hd = 16;
  const Problem p = make_problem(n, hd, 1);
  const Partial whole = chunk(p.scores, p.v, 0, n, hd);
  for (int splits : {2, 3, 7, 64}) {
    Partial acc{{}, std::vector<float>(hd, 0.0f)};
    for (int s = 0; s < splits; ++s) {
      const Partial c = chunk(p.scores, p.v, s * n / splits, (s + 1) * n / splits, hd);
      merge_partial(acc.state, acc.acc.data(), c.state, c.acc.data(), hd);
    }
    for (int d = 0; d < hd; ++d)
      EXPECT_NEAR(acc.acc[d] / acc.state.sum, whole.acc[d] / whole.state.sum,
                  1e-5f * std::max(1.0f, std::fabs(whole.acc[d] / whole.state.sum)))
          << "splits " << splits << " dim " << d;
  }
}

TEST(AttentionMerge, MergeIsAssociative) {
  const int n = 300, hd = 8;
  const Problem p = make_problem(n, hd, 2);
  const Partial a = chunk(p.scores, p.v, 0, 100, hd), b = chunk(p.scores, p.v, 100, 170, hd),
                c = chunk(p.scores, p.v, 170, n, hd);
  Partial left = a;  // (a + b) + c
  merge_partial(left.state, left.acc.data(), b.state, b.acc.data(), hd);
  merge_partial(left.state, left.acc.data(), c.state, c.acc.data(), hd);
  Partial bc = b;  // a + (b + c)
  merge_partial(bc.state, bc.acc.data(), c.state, c.acc.data(), hd);
  Partial right = a;
  merge_partial(right.state, right.acc.data(), bc.state, bc.acc.data(), hd);
  EXPECT_NEAR(left.state.max, right.state.max, 0.0f);
  EXPECT_NEAR(left.state.sum, right.state.sum, 1e-5f * right.state.sum);
  for (int d = 0; d < hd; ++d)
    EXPECT_NEAR(left.acc[d] / left.state.sum, right.acc[d] / right.state.sum, 1e-5f);
}

TEST(AttentionMerge, EmptyChunksContributeNothing) {
  const int hd = 4;
  const Problem p = make_problem(10, hd, 3);
  const Partial real = chunk(p.scores, p.v, 0, 10, hd);
  Partial empty{{}, std::vector<float>(hd, 0.0f)};
  Partial x = empty;
  merge_partial(x.state, x.acc.data(), real.state, real.acc.data(), hd);
  merge_partial(x.state, x.acc.data(), empty.state, empty.acc.data(), hd);
  EXPECT_EQ(x.state.max, real.state.max);
  EXPECT_FLOAT_EQ(x.state.sum, real.state.sum);
  for (int d = 0; d < hd; ++d) EXPECT_FLOAT_EQ(x.acc[d], real.acc[d]);
  Partial both = empty;
  merge_partial(both.state, both.acc.data(), empty.state, empty.acc.data(), hd);
  EXPECT_FALSE(std::isnan(both.state.sum));
  EXPECT_EQ(both.state.sum, 0.0f);
}

TEST(AttentionMerge, SplitRuleFillsTheDeviceOnlyForFewLongSequences) {
  // Batch 1, 8 KV heads, 32k context on a 132-SM device: split to fill the SMs.
  EXPECT_GT(choose_num_splits(8, 32768, 132), 8);
  // Batch 64 x 8 heads = 512 work items already fill 132 SMs: no split.
  EXPECT_EQ(choose_num_splits(512, 4096, 132), 1);
  // Short contexts are never split.
  EXPECT_EQ(choose_num_splits(1, 100, 132), 1);
  // Chunks never get shorter than the minimum.
  EXPECT_LE(choose_num_splits(1, 1024, 132), 1024 / 256);
}

}  // namespace
}  // namespace kvheap
