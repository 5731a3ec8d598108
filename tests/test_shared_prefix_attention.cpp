// Shared-prefix attention (kernels/shared_prefix_attention.hpp) against plain paged attention on
// the same pool: groups of rows reading their prefix once must compute what each row computes
// reading its whole context, over awkward shapes, group sizes and prefix lengths.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "chapters/03_paged_blocks/paged_batch.hpp"
#include "chapters/04_cow_prefix_sharing/shared_batch.hpp"
#include "common/model_config.hpp"
#include "kernels/attention_batch.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/shared_prefix_attention.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

/// A pool of random K and V, and sequences built from shared and private blocks.
template <class T>
struct Pool {
  int block_size, kv_dim;
  std::vector<T> k, v;  // [num_blocks * block_size, kv_dim]
  Pool(int num_blocks, int bs, int kvd, unsigned seed) : block_size(bs), kv_dim(kvd) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    k.resize(static_cast<std::size_t>(num_blocks) * bs * kvd);
    v.resize(k.size());
    for (std::size_t e = 0; e < k.size(); ++e) {
      cpu::from_float(nd(rng), k[e]);
      cpu::from_float(nd(rng), v[e]);
    }
  }
};

struct Shape {
  int n_kv_heads, group, head_dim, block_size;
};

/// Sequences: for each of `prefix_blocks` (one entry per group), `members` sequences whose page
/// tables start with the same blocks and continue with private ones; plus one unshared sequence.
/// Each sequence gets one row at its last position (a decode step). Returns the largest relative
/// difference between shared-prefix and plain attention.
template <class T>
double shared_vs_plain(const Shape& s, const std::vector<int>& prefix_blocks, int members,
                       int private_positions, unsigned seed) {
  ModelConfig c;
  c.n_kv_heads = s.n_kv_heads;
  c.n_heads = s.n_kv_heads * s.group;
  c.head_dim = s.head_dim;
  const int bs = s.block_size;
  const int private_blocks = (private_positions + bs - 1) / bs + 1;
  int total = 0;
  for (int pb : prefix_blocks) total += pb + members * private_blocks;
  total += 64;
  Pool<T> pool(total, bs, c.kv_dim(), seed);
  std::mt19937 rng(seed + 1);
  std::vector<int> free_blocks(total);
  for (int b = 0; b < total; ++b) free_blocks[b] = b;
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  auto take = [&] {
    const int b = free_blocks.back();
    free_blocks.pop_back();
    return b;
  };
  ch03::PagedBatch pb;
  pb.indptr = {0};
  auto add_sequence = [&](const std::vector<int>& table, int length) {
    pb.indices.insert(pb.indices.end(), table.begin(), table.end());
    pb.indptr.push_back(static_cast<int>(pb.indices.size()));
    pb.last_page_len.push_back((length - 1) % bs + 1);
    pb.row_seq.push_back(static_cast<int>(pb.row_seq.size()));
    pb.n_ctx.push_back(length);
  };
  for (int prefix : prefix_blocks) {
    std::vector<int> shared;
    for (int b = 0; b < prefix; ++b) shared.push_back(take());
    for (int m = 0; m < members; ++m) {
      const int extra = static_cast<int>(rng() % (private_positions + 1));  // 0 = no suffix
      std::vector<int> table = shared;
      for (int b = 0; b < (extra + bs - 1) / bs; ++b) table.push_back(take());
      add_sequence(table, prefix * bs + extra);
    }
  }
  {  // one sequence that shares nothing
    std::vector<int> table;
    for (int b = 0; b < 3; ++b) table.push_back(take());
    add_sequence(table, 3 * bs - 1);
  }
  const SharedPrefixPlan plan = ch04::plan_shared_prefixes(pb, bs);
  EXPECT_EQ(plan.groups(), static_cast<int>(prefix_blocks.size()));
  for (int g = 0; g < plan.groups(); ++g) EXPECT_EQ(plan.prefix_len[g], prefix_blocks[g] * bs);

  const int n = static_cast<int>(pb.n_ctx.size());
  std::vector<float> q(static_cast<std::size_t>(n) * c.q_dim());
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (float& x : q) x = nd(rng);
  auto rows_of = [&](int i) {
    return cpu::PagedRows<T>{pool.k.data(), pool.v.data(),
                             pb.indices.data() + pb.indptr[pb.row_seq[i]], bs, c.kv_dim()};
  };
  auto n_ctx_of = [&](int i) { return pb.n_ctx[i]; };
  std::vector<float> plain(q.size()), shared(q.size(), -1.0f);
  cpu::attend_batch<T>(c, n, rows_of, n_ctx_of, q.data(), plain.data());
  cpu::attend_batch_shared_prefix<T>(c, n, rows_of, n_ctx_of, plan, q.data(), shared.data());
  // The unshared row goes through attend_batch itself: bitwise.
  const long last = static_cast<long>(n - 1) * c.q_dim();
  EXPECT_TRUE(std::equal(plain.begin() + last, plain.end(), shared.begin() + last));
  return test::rel_inf_error(shared, plain);
}

TEST(SharedPrefixAttention, EqualsPlainPagedAttentionOverAwkwardShapes) {
  for (int group : {1, 2, 4, 8})
    for (int hd : {8, 64, 128}) {
      const Shape s{2, group, hd, 16};
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
}

// Rows group by their first block, share the run of blocks all their tables begin with, and only
// the whole blocks their shortest row attends to; a lone sequence (even with several rows) or a
// prefix shorter than a block makes no group.
TEST(SharedPrefixAttention, PlanGroupsSequencesByTheirCommonFirstBlocks) {
  ch03::PagedBatch pb;
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
