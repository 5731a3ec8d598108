// Shared-prefix attention (kernels/shared_prefix_attention.hpp) against plain paged attention on
// the same pool: groups of rows reading their prefix once must compute what each row computes
// reading its whole context, over awkward shapes, group sizes and prefix lengths.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "chapters/03_paged_blocks/paged_cache.hpp"
#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "common/model/model_config.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/shared_prefix_attention_cpu.hpp"
#include "tests/kernels/shared_prefix_case.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

/// Shared-prefix attention against attend_batch on a random case: the largest relative difference.
template <class T>
double shared_vs_plain(const test::SharedPrefixShape& s, const std::vector<int>& prefix_blocks,
                       int members, int private_positions, unsigned seed) {
  const test::SharedPrefixCase<T> c(s, prefix_blocks, members, private_positions, seed);
  std::vector<float> plain(c.q.size()), shared(c.q.size(), -1.0f);
  c.attend_plain(plain.data());
  cpu::attend_batch_shared_prefix<T>(c.shape(), c.n(), c.rows_of(), c.n_ctx_of(), c.plan,
                                     c.q.data(), shared.data());
  // The unshared row goes through attend_batch itself: bitwise.
  const long last = static_cast<long>(c.n() - 1) * c.config.q_dim();
  EXPECT_TRUE(std::equal(plain.begin() + last, plain.end(), shared.begin() + last));
  return test::rel_inf_error(shared, plain);
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
}

// Prefixes longer than attend_batch's chunk (2048 positions): plain attention splits them into
// chunks merged by log-sum-exp, the shared prefix is one pass.
TEST(SharedPrefixAttention, LongPrefixes) {
  EXPECT_LE(shared_vs_plain<float>({2, 4, 64, 16}, {160}, 4, 100, 11), 1e-5);
}

TEST(SharedPrefixAttention, PositionsReadCountEachPrefixOnce) {
  SharedPrefixPlan plan;
  plan.indptr = {0, 3, 5};
  plan.rows = {0, 1, 2, 4, 5};
  plan.prefix_len = {32, 16};
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
}

// Rows group by their first block, share the run of blocks all their tables begin with, and only
// the whole blocks their shortest row attends to; a lone sequence (even with several rows) or a
// prefix shorter than a block makes no group.
TEST(SharedPrefixAttention, PlanGroupsSequencesByTheirCommonFirstBlocks) {
  KVView pb;
  pb.indptr = {0, 3, 6, 8, 10, 11};
  pb.indices = {7, 2, 9, /**/ 7, 2, 4, /**/ 7, 5, /**/ 1, 3, /**/ 8};
  pb.row_seq = {0, 1, 2, 3, 3, 4};
  pb.n_ctx = {40, 45, 20, 30, 31, 12};
  pb.last_page_len = {8, 13, 4, 14, 12};
  const SharedPrefixPlan plan = ch04::plan_shared_prefixes(pb, 16);
  ASSERT_EQ(plan.groups(), 1);
  EXPECT_EQ(plan.rows, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plan.prefix_len[0], 16);  // tables agree on [7, 2] but row 2 holds only 7, 5
  pb.n_ctx[2] = 15;                   // row 2 now attends to less than a block: it cannot join
  const SharedPrefixPlan shorter = ch04::plan_shared_prefixes(pb, 16);
  ASSERT_EQ(shorter.groups(), 1);
  EXPECT_EQ(shorter.rows, (std::vector<int>{0, 1}));
  EXPECT_EQ(shorter.prefix_len[0], 32);
}

}  // namespace
}  // namespace kvheap
