// Shared-prefix attention (kernels/shared_prefix_attention.hpp) against plain paged attention on
// the same pool: groups of rows reading their prefix once must compute what each row computes
// reading its whole context, over awkward shapes, group sizes and prefix lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "chapters/03_paged_blocks/paged_cache.hpp"
#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "common/model/model_config.hpp"
#include "kernels/attend_product_cpu.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/shared_prefix_attention_cpu.hpp"
#include "tests/kernels/shared_prefix_case.hpp"
#include "tests/support/counted_rows.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

/// Shared-prefix attention against attend_batch on a random case: the largest relative difference.
template <class T>
double shared_vs_plain(const test::SharedPrefixCase<T>& c) {
  std::vector<float> plain(c.q.size()), shared(c.q.size(), -1.0f);
  c.attend_plain(plain.data());
  c.attend_shared(c.plan, shared.data());
  // The unshared row goes through attend_batch itself: bitwise.
  const long last = static_cast<long>(c.n() - 1) * c.config.q_dim();
  EXPECT_TRUE(std::equal(plain.begin() + last, plain.end(), shared.begin() + last));
  return test::rel_inf_error(shared, plain);
}
template <class T>
double shared_vs_plain(const test::SharedPrefixShape& s, const std::vector<int>& prefix_blocks,
                       int members, int private_positions, unsigned seed) {
  return shared_vs_plain(
      test::SharedPrefixCase<T>(s, prefix_blocks, members, private_positions, seed));
}

TEST(SharedPrefixAttention, EqualsPlainPagedAttentionOverAwkwardShapes) {
  for (int group : {1, 2, 4, 8})
    for (int hd : {8, 64, 128}) {
      const test::SharedPrefixShape s{2, group, hd, 16};
      EXPECT_LE(shared_vs_plain<float>(s, {3, 1}, 3, 40, group * 100 + hd), 1e-5)
          << "group " << group << ", head_dim " << hd;
    }
  EXPECT_LE(shared_vs_plain<float>({3, 2, 40, 7}, {5, 2, 9}, 5, 20, 7), 1e-5);
  EXPECT_LE(shared_vs_plain<float>({1, 4, 64, 1}, {17}, 17, 3, 8), 1e-5);
}

TEST(SharedPrefixAttention, HalfPrecisionCachesToo) {
  EXPECT_LE(shared_vs_plain<cpu::BF16Bits>({2, 4, 64, 16}, {4, 2}, 4, 30, 9), 1e-5);
  EXPECT_LE(shared_vs_plain<cpu::F16Bits>({2, 2, 128, 16}, {3}, 6, 30, 10), 1e-5);
  // 16 rows x 4 heads: the prefix pass as products with AVX-512 or AVX2 (product_pays).
  EXPECT_LE(shared_vs_plain<cpu::F16Bits>({2, 4, 64, 16}, {3}, 16, 30, 14), 1e-5);
  EXPECT_LE(shared_vs_plain<cpu::BF16Bits>({2, 4, 64, 16}, {4, 2}, 16, 30, 12), 1e-5);
}

// Trees of shared prefixes: a system prompt, documents after it, questions after those. Every
// level is read once by the rows below it, and each row merges its path's levels, then its own
// positions. Depths 1-3 in one batch, rows ending at every depth (a row of the two-level tree
// holds only the system prompt), awkward block sizes, and 16 rows x 4 heads under one root so
// that its pass is a product with AVX-512 or AVX2.
const std::vector<test::PrefixLevel>& prefix_trees() {
  static const std::vector<test::PrefixLevel> trees = {
      {2, 1, {{2, 3, {}}, {1, 2, {}}}},                        // two levels, a row at the first
      {1, 0, {{2, 0, {{1, 2, {}}, {1, 2, {}}}}, {1, 2, {}}}},  // three levels
      {3, 3, {}},                                              // one
  };
  return trees;
}
TEST(SharedPrefixAttention, TreesOfPrefixesEqualPlainAttention) {
  for (int bs : {16, 5})
    for (int hd : {8, 64}) {
      const test::SharedPrefixShape s{2, 2, hd, bs};
      EXPECT_LE(shared_vs_plain(test::SharedPrefixCase<float>(s, prefix_trees(), 12, 30 + bs)),
                1e-5)
          << "block size " << bs << ", head_dim " << hd;
    }
  EXPECT_LE(
      shared_vs_plain(test::SharedPrefixCase<cpu::BF16Bits>({2, 4, 64, 7}, prefix_trees(), 20, 31)),
      1e-5);
  const std::vector<test::PrefixLevel> wide = {{3, 0, {{2, 8, {}}, {2, 6, {{1, 2, {}}}}}}};
  EXPECT_LE(shared_vs_plain(test::SharedPrefixCase<cpu::F16Bits>({2, 4, 64, 16}, wide, 20, 32)),
            1e-5);
}

// Prefixes longer than attend_batch's chunk (2048 positions): plain attention splits them into
// chunks merged by log-sum-exp, the shared prefix is one pass.
TEST(SharedPrefixAttention, LongPrefixes) {
  EXPECT_LE(shared_vs_plain<float>({2, 4, 64, 16}, {160}, 4, 100, 11), 1e-5);
  EXPECT_LE(shared_vs_plain<float>({2, 4, 64, 16}, {160}, 16, 100, 13), 1e-5);  // products
}

/// attend_span_product against attend_span on random K, V and queries over positions [t_begin,
/// t_end) of a contiguous cache: the largest difference of the finished outputs relative to
/// their largest magnitude, after checking that both give every head the same softmax state
/// within rounding.
template <class T>
double product_vs_span(int n_kv_heads, int heads, int head_dim, int t_begin, int t_end,
                       unsigned seed) {
  SCOPED_TRACE(::testing::Message() << n_kv_heads << " KV heads x " << heads << ", head_dim "
                                    << head_dim << ", span [" << t_begin << ", " << t_end << ")");
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const long kv_dim = static_cast<long>(n_kv_heads) * head_dim;
  std::vector<T> k(static_cast<std::size_t>(t_end) * kv_dim), v(k.size());
  for (std::size_t e = 0; e < k.size(); ++e) {
    cpu::from_float(nd(rng), k[e]);
    cpu::from_float(nd(rng), v[e]);
  }
  const cpu::AttendShape sh{n_kv_heads, heads, head_dim};
  std::vector<float> q(static_cast<std::size_t>(sh.q_dim()));
  for (float& x : q) x = 2.0f * nd(rng);  // peaky enough that the softmax matters
  const cpu::ContiguousRows<T> rows{k.data(), v.data(), kv_dim};
  const int n_q = sh.n_heads();
  std::vector<float> want(q.size(), -1.0f), got(q.size(), -1.0f);
  std::vector<float> want_max(n_q), want_sum(n_q), got_max(n_q), got_sum(n_q);
  std::vector<float> span_scratch(cpu::attend_span_scratch_floats(n_q, head_dim));
  std::vector<float> product_scratch(cpu::attend_product_scratch_floats(heads, head_dim));
  cpu::attend_span<T>(q.data(), rows, t_begin, t_end, sh, 0, n_kv_heads, want.data(),
                      want_max.data(), want_sum.data(), span_scratch.data());
  // The product may ask for the rows of its span only, prefetching included.
  const test::CountedRows<T> checked{rows, t_begin, t_end};
  cpu::attend_span_product<T>(q.data(), checked, t_begin, t_end, sh, 0, n_kv_heads, got.data(),
                              got_max.data(), got_sum.data(), product_scratch.data());
  EXPECT_EQ(checked.outside, 0) << "positions asked for outside the span";
  for (int h = 0; h < n_q; ++h) {
    if (t_end == t_begin) {
      EXPECT_EQ(got_max[h], -std::numeric_limits<float>::infinity());
      EXPECT_EQ(got_sum[h], 0.0f);
      continue;
    }
    // A score's rounding is relative to the products it sums, not to the score: one near 0 has
    // an error near 1e-7 all the same.
    EXPECT_NEAR(got_max[h], want_max[h], 1e-5f * std::max(1.0f, std::abs(want_max[h])))
        << "head " << h;
    EXPECT_NEAR(got_sum[h], want_sum[h], 1e-5f * want_sum[h]) << "head " << h;
    cpu::finish_head(&want[static_cast<long>(h) * head_dim], want_sum[h], head_dim);
    cpu::finish_head(&got[static_cast<long>(h) * head_dim], got_sum[h], head_dim);
  }
  return test::rel_inf_error(got, want);
}

TEST(SharedPrefixAttention, ProductPrefixPassEqualsTheSpanWithinRounding) {
  // Heads per KV head around the tiles' 8, 6 and 4 (13 = 6 + 6 + 1, 64 = 10 x 6 + 4, 3 = 2 + 1
  // without AVX-512), head_dim around the value tiles' 64 and 16, spans of two blocks (128
  // positions with AVX-512, 48 without) and some. Where prefetch_helps(), spans of more than one
  // block also prefetch, and the checked rows hold every position asked for within the span.
  const int span = 2 * cpu::kProductBlock + 11;
  for (int heads : {1, 3, 8, 13, 64})
    for (int hd : {8, 40, 64, 72, 128})
      EXPECT_LE(product_vs_span<float>(2, heads, hd, 5, 5 + span, heads * 131 + hd), 1e-5);
  EXPECT_LE(product_vs_span<float>(1, 9, 64, 0, cpu::kProductBlock, 1), 1e-5);  // a whole block
  EXPECT_LE(product_vs_span<float>(1, 9, 64, 0, 48, 6), 1e-5);   // 48, a whole block with AVX2
  EXPECT_LE(product_vs_span<float>(1, 9, 64, 31, 32, 2), 1e-5);  // one position
  EXPECT_LE(product_vs_span<float>(3, 16, 64, 7, 7, 3), 1e-5);   // an empty span
  EXPECT_LE(product_vs_span<cpu::BF16Bits>(2, 32, 128, 0, 300, 4), 1e-5);
  EXPECT_LE(product_vs_span<cpu::F16Bits>(2, 12, 48, 3, 150, 5), 1e-5);
  // Stored halves at the head sizes compiled apart (with AVX-512: one vector of heads alone, and
  // one after a pair), and at a head size of no whole number of vectors.
  EXPECT_LE(product_vs_span<cpu::BF16Bits>(2, 16, 128, 1, 290, 7), 1e-5);
  EXPECT_LE(product_vs_span<cpu::F16Bits>(1, 48, 64, 2, 270, 8), 1e-5);
  EXPECT_LE(product_vs_span<cpu::BF16Bits>(2, 16, 40, 0, 200, 9), 1e-5);
}

TEST(SharedPrefixAttention, PositionsReadCountEachPrefixOnce) {
  SharedPrefixPlan plan;
  plan.indptr = {0, 3, 5};
  plan.rows = {0, 1, 2, 4, 5};
  plan.prefix_len = {32, 16};
  plan.prefix_begin = {0, 0};
  const std::vector<int> n_ctx = {40, 33, 32, 10, 20, 17};
  EXPECT_EQ(plan.positions_read(n_ctx), 40 + 33 + 32 + 10 + 20 + 17 - 2 * 32 - 1 * 16);
  EXPECT_EQ(SharedPrefixPlan{}.positions_read(n_ctx), 40 + 33 + 32 + 10 + 20 + 17);
  // No group at all (every prompt sampled once) with the GPU's slicing: the widest group has no
  // rows, and nothing is divided by its empty slices (this trapped on a GPU machine's build).
  EXPECT_EQ(SharedPrefixPlan{}.positions_read(n_ctx, 4, kGpuHeadsPerBlock),
            40 + 33 + 32 + 10 + 20 + 17);
  static_assert(slice_heads(0, kGpuHeadsPerBlock) == 0 && slice_heads(24, 16) == 12);
  // The GPU kernel holds at most 16 query heads per block. At 8 heads per row the wide row is
  // 3 x 8 = 24 heads, cut into two slices of 12: 3 rows (24 heads) and 2 rows (16 heads) both
  // read their prefix twice.
  EXPECT_EQ(plan.positions_read(n_ctx, 8, kGpuHeadsPerBlock),
            40 + 33 + 32 + 10 + 20 + 17 - 1 * 32 - 0 * 16);
  // At 4 heads per row the widest group's 12 heads fit one block: every prefix is read once.
  EXPECT_EQ(plan.positions_read(n_ctx, 4, kGpuHeadsPerBlock),
            40 + 33 + 32 + 10 + 20 + 17 - 2 * 32 - 1 * 16);
  // At 16 heads per row, 48 heads make three slices of 16: 3 reads for 3 rows, 2 for 2.
  EXPECT_EQ(plan.positions_read(n_ctx, 16, kGpuHeadsPerBlock), 40 + 33 + 32 + 10 + 20 + 17);
  // Both groups are top levels; by level they read 32 + 16 once, and twice + twice at 8 heads.
  EXPECT_EQ(plan.positions_read_by_level(), (std::vector<long>{48}));
  EXPECT_EQ(plan.positions_read_by_level(8, kGpuHeadsPerBlock),
            (std::vector<long>{2 * 32 + 2 * 16}));
  EXPECT_TRUE(SharedPrefixPlan{}.positions_read_by_level().empty());
  // A tree: rows 0-3 share [0, 32); rows 0-1 then [32, 48), rows 2-3 [32, 40); rows 0-1 then
  // [48, 64). Each level is read once: 32, then 16 + 8, then 16.
  SharedPrefixPlan tree;
  tree.indptr = {0, 4, 6, 8, 10};
  tree.rows = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1};
  tree.prefix_begin = {0, 32, 32, 48};
  tree.prefix_len = {32, 16, 8, 16};
  const std::vector<int> tree_ctx = {70, 66, 41, 45};
  EXPECT_EQ(tree.positions_read_by_level(), (std::vector<long>{32, 24, 16}));
  EXPECT_EQ(tree.positions_read(tree_ctx), 70 + 66 + 41 + 45 - 3 * 32 - 1 * 16 - 1 * 8 - 1 * 16);
}

// Rows group by their first block, share the run of blocks all their tables begin with, and only
// the whole blocks their shortest row attends to; those that go on alike form the next level; a
// lone sequence (even with several rows) or a prefix shorter than a block makes no group.
TEST(SharedPrefixAttention, PlanGroupsSequencesByTheirCommonFirstBlocks) {
  KVView pb;
  pb.indptr = {0, 3, 6, 8, 10, 11};
  pb.indices = {7, 2, 9, /**/ 7, 2, 4, /**/ 7, 5, /**/ 1, 3, /**/ 8};
  pb.row_seq = {0, 1, 2, 3, 3, 4};
  pb.n_ctx = {40, 45, 20, 30, 31, 12};
  pb.last_page_len = {8, 13, 4, 14, 12};
  const SharedPrefixPlan plan = ch04::plan_shared_prefixes(pb, 16);
  // Rows 0-2 share block 7; rows 0 and 1 then go on with block 2, a second level.
  ASSERT_EQ(plan.groups(), 2);
  EXPECT_EQ(plan.indptr, (std::vector<int>{0, 3, 5}));
  EXPECT_EQ(plan.rows, (std::vector<int>{0, 1, 2, 0, 1}));
  EXPECT_EQ(plan.prefix_begin, (std::vector<int>{0, 16}));
  EXPECT_EQ(plan.prefix_len, (std::vector<int>{16, 16}));
  pb.n_ctx[2] = 15;  // row 2 now attends to less than a block: it cannot join
  const SharedPrefixPlan shorter = ch04::plan_shared_prefixes(pb, 16);
  ASSERT_EQ(shorter.groups(), 1);
  EXPECT_EQ(shorter.rows, (std::vector<int>{0, 1}));
  EXPECT_EQ(shorter.prefix_begin[0], 0);
  EXPECT_EQ(shorter.prefix_len[0], 32);
}

}  // namespace
}  // namespace kvheap
