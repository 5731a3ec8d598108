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

TEST(AttentionMerge, SplitRuleFillsOneWaveOfResidentBlocks) {
  // Llama-3-8B at batch 1: 8 KV heads on a 132-SM device that holds 4 blocks per SM (528 at
  // once). A long context splits until the blocks fill that wave, or the cap stops it.
  EXPECT_EQ(choose_num_splits(8, 32768, 132, 4, 64), 64);
  EXPECT_EQ(choose_num_splits(8, 32768, 132, 2, 64), 33);  // 264 resident: 8 x 33 = 264
  // At 1k positions the 64-position minimum chunk binds: 16 splits, 128 blocks, not 32 as a
  // 256-position minimum gave.
  EXPECT_EQ(choose_num_splits(8, 1024, 132, 4, 64), 16);
  // 512 work items already fill 528 slots: no split.
  EXPECT_EQ(choose_num_splits(512, 4096, 132, 4, 64), 1);
  // Short contexts are never split below the minimum chunk.
  EXPECT_EQ(choose_num_splits(1, 100, 132, 4, 64), 1);
  // Degenerate inputs give one pass.
  EXPECT_EQ(choose_num_splits(0, 4096, 132, 4, 64), 1);
  EXPECT_EQ(choose_num_splits(8, 4096, 132, 0, 64), 16);  // an unknown occupancy counts as 1
}

TEST(AttentionMerge, SplitRuleKeepsChunksLongAndBlocksInOneWave) {
  // Over a grid of shapes: every chunk has at least min_chunk positions, a split never makes
  // more blocks than are resident at once, and every count from 1 to kMaxSplits comes out (the
  // simulator tests run each of them, tests/kernels/test_decode_attention.cpp).
  std::vector<bool> seen(kMaxSplits + 1, false);
  for (int work : {1, 2, 3, 5, 8, 32, 64, 200, 1000})
    for (int ctx : {1, 63, 64, 200, 1024, 4096, 32768})
      for (int sm : {1, 8, 108, 132})
        for (int per_sm : {1, 2, 3, 4, 8})
          for (int min_chunk : {16, 64, 256}) {
            const int s = choose_num_splits(work, ctx, sm, per_sm, min_chunk);
            ASSERT_GE(s, 1);
            ASSERT_LE(s, kMaxSplits);
            seen[s] = true;
            if (s > 1) {
              EXPECT_GE(ctx / s, min_chunk) << work << " " << ctx << " " << sm << " " << per_sm;
              EXPECT_LE(static_cast<long>(work) * s, static_cast<long>(sm) * per_sm);
            }
          }
  for (int s = 1; s <= kMaxSplits; ++s) {
    // The grid reaches most counts; the rest come from a context of exactly s chunks.
    if (!seen[s]) seen[s] = choose_num_splits(1, s * 16, 132, 4, 16) == s;
    EXPECT_TRUE(seen[s]) << s << " splits never chosen";
  }
}

}  // namespace
}  // namespace kvheap
