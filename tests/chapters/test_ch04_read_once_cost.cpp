// Chapter 4's cost model for reading a shared prefix once (read_once_cost.hpp): each group priced
// both ways with the roofline of its loops, kept only where it saves time, and a dropped level's
// positions handed to the level below, so that every row still attends to every position once.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "common/cache/read_once_cost.hpp"
#include "common/measure/attend_rate.hpp"
#include "tests/kernels/shared_prefix_case.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

// Llama-3-8B's heads with a bf16 cache: 2 x 8 x 128 x 2 = 4096 bytes a position.
const AttentionDims kLlamaHeads{8, 4, 128, 2};

TEST(ReadOnceCost, PricesAddTheLoopsTimeAndTheBytesTime) {
  // 20 GB/s; the loops do 100 GFLOP/s for a row's 4 heads a KV head, 200 for wider passes.
  const AttentionRates rates{20e9, 0, [](int k) { return k == 4 ? 100e9 : 200e9; }};
  const GroupPrice p = price_group(4, 1024, kLlamaHeads, rates);
  // Plain: 4 rows do 1024 positions x 32 heads x 512 flops at 100 GFLOP/s (0.671 ms), and each
  // reads the 1024 positions of 4096 bytes (0.839 ms).
  const double flops = 4.0 * 1024 * 32 * 512;
  EXPECT_DOUBLE_EQ(p.plain_s, flops / 100e9 + 4.0 * 1024 * 4096 / 20e9);
  // Read once: the same flops at 200 GFLOP/s (0.336 ms), the bytes once (0.210 ms), and the
  // partial states of 4 rows x 32 heads x (128 + 2) floats written and read back.
  EXPECT_DOUBLE_EQ(p.read_once_s, flops / 200e9 + (1024.0 * 4096 + 2.0 * 4 * 32 * 130 * 4) / 20e9);
  EXPECT_TRUE(p.read_once);
  EXPECT_EQ(p.rows, 4);
  EXPECT_EQ(p.positions, 1024);
  // With the prefix in cache, plain reads it from memory once too.
  const GroupPrice cached = price_group(4, 1024, kLlamaHeads, rates, true);
  EXPECT_DOUBLE_EQ(cached.plain_s, flops / 100e9 + 1024.0 * 4096 / 20e9);
}

TEST(ReadOnceCost, PlainWhereTheWidePassSavesLessThanTheMargin) {
  // Memory so fast that only the arithmetic counts: read-once saves what its loops' rate saves.
  for (double faster : {1.0, 0.97, 1.03, 1.08, 1.5}) {
    const AttentionRates rates{1e18, 0, [=](int k) { return k == 4 ? 100e9 : 100e9 * faster; }};
    const GroupPrice p = price_group(8, 4096, kLlamaHeads, rates);
    EXPECT_EQ(p.read_once, 1.0 / faster <= 1.0 - kReadOnceMargin) << "wide pass x" << faster;
  }
  // A slower wide pass loses even with the bytes as the bound of plain attention.
  const AttentionRates slow{20e9, 0, [](int k) { return k == 4 ? 100e9 : 10e9; }};
  EXPECT_FALSE(price_group(2, 4096, kLlamaHeads, slow).read_once);
}

/// Attention through `plan` against plain attention: the largest relative difference.
double planned_vs_plain(const test::SharedPrefixCase<float>& c, const SharedPrefixPlan& plan) {
  std::vector<float> plain(c.q.size()), shared(c.q.size(), -1.0f);
  c.attend_plain(plain.data());
  c.attend_shared(plan, shared.data());
  return test::rel_inf_error(shared, plain);
}

TEST(ReadOnceCost, ADroppedLevelGivesItsPositionsToTheLevelBelow) {
  // A root of 2 blocks shared by 6 sequences (one ends there), then 3 sequences on 2 more
  // blocks and 2 on 1 more. Wide passes of 5 rows or more are priced slow, so the root is
  // dropped and both documents are read once from position 0.
  const int bs = 5;
  const std::vector<test::PrefixLevel> tree = {{2, 1, {{2, 3, {}}, {1, 2, {}}}}};
  const test::SharedPrefixCase<float> c({2, 2, 8, bs}, tree, 12, 41);
  ASSERT_EQ(c.plan.groups(), 3);
  const AttentionDims dims{2, 2, 8, sizeof(float)};
  const AttentionRates rates{1e10, 0, [](int k) { return k >= 5 * 2 ? 1e8 : 1e12; }};
  const ReadOnceChoice choice = choose_read_once(c.plan, dims, rates);
  ASSERT_EQ(choice.prices.size(), 3U);
  EXPECT_FALSE(choice.prices[0].read_once);
  EXPECT_TRUE(choice.prices[1].read_once);
  EXPECT_TRUE(choice.prices[2].read_once);
  ASSERT_EQ(choice.kept(), 2);
  EXPECT_EQ(choice.plan.prefix_begin, (std::vector<int>{0, 0}));
  EXPECT_EQ(choice.plan.prefix_len, (std::vector<int>{4 * bs, 3 * bs}));
  EXPECT_EQ(choice.prices[1].begin, 0);
  EXPECT_EQ(choice.prices[1].positions, 4 * bs);
  // Every row still attends to every position once.
  EXPECT_LE(planned_vs_plain(c, choice.plan), 1e-5);
  // Bytes: what the kept groups save, and nothing for the dropped root.
  long all = 0;
  for (int n : c.pages.n_ctx) all += n;
  EXPECT_EQ(choice.plan.positions_read(c.pages.n_ctx), all - 2 * 4 * bs - 1 * 3 * bs);
}

TEST(ReadOnceCost, TreesPricedEveryWayStillAttendToEveryPositionOnce) {
  // Three levels; each rule of which widths are slow drops another set of levels.
  const std::vector<test::PrefixLevel> tree = {
      {1, 1, {{2, 0, {{1, 2, {}}, {1, 3, {}}}}, {1, 2, {}}}}};
  const test::SharedPrefixCase<float> c({2, 2, 8, 7}, tree, 10, 43);
  ASSERT_EQ(c.plan.groups(), 5);
  const AttentionDims dims{2, 2, 8, sizeof(float)};
  for (int slow_from : {2, 3, 4, 6, 9, 100}) {
    const AttentionRates rates{1e10, 0, [=](int k) { return k >= slow_from * 2 ? 1e8 : 1e12; }};
    const ReadOnceChoice choice = choose_read_once(c.plan, dims, rates);
    EXPECT_LE(planned_vs_plain(c, choice.plan), 1e-5) << "slow from " << slow_from << " rows";
    long saved = 0;
    for (int g = 0; g < choice.kept(); ++g)
      saved += static_cast<long>(choice.plan.indptr[g + 1] - choice.plan.indptr[g] - 1) *
               choice.plan.prefix_len[g];
    long all = 0;
    for (int n : c.pages.n_ctx) all += n;
    EXPECT_EQ(choice.plan.positions_read(c.pages.n_ctx), all - saved);
  }
}

TEST(ReadOnceCost, PlainWherePrefixesFitInHalfTheCache) {
  // Two groups of 4 sequences sharing 3 and 2 blocks of 16 positions (2 x 2 x 8 x 4 = 128 bytes
  // each): 80 positions, 10240 bytes. The loops are as fast at any width, so reading once saves
  // only bytes, and saves none when the siblings find the prefix in cache.
  const test::SharedPrefixCase<float> c({2, 2, 8, 16}, {3, 2}, 4, 20, 45);
  const AttentionDims dims{2, 2, 8, sizeof(float)};
  for (double cache : {0.0, 10240.0, 2 * 10240.0 - 1, 2 * 10240.0, 1e9}) {
    const AttentionRates rates{1e10, cache, [](int) { return 1e11; }};
    EXPECT_EQ(choose_read_once(c.plan, dims, rates).kept(), cache < 2 * 10240.0 ? 2 : 0)
        << "cache " << cache;
  }
}

TEST(CpuAttendRates, MeasuredOnceAtTheLoopsOwnPace) {
  // One thread, so that the pace can be timed here as well, with its own count of the flops.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const CpuAttendRates rates(2, 64, DType::BF16, 3);
  const double measured = rates.flops_per_s(4);
  // Widths between the powers of two take the rate below them; the row's own width is its own.
  EXPECT_EQ(rates.flops_per_s(7), measured);
  EXPECT_EQ(rates.flops_per_s(1000), rates.measured().at(CpuAttendRates::kMostHeads));
  EXPECT_EQ(rates.flops_per_s(3), rates.measured().at(3));
  EXPECT_EQ(rates.measured().size(), 9U);  // 3, and 2 to 256
  // attend_span over 256 cached positions of 2 KV heads x 4 query heads, timed directly: each
  // position costs every head a 64-element dot product and a 64-element update.
  std::vector<cpu::BF16Bits> k(256 * 128), v(256 * 128);
  for (std::size_t e = 0; e < k.size(); ++e) {
    cpu::from_float(0.01f * static_cast<float>(e % 37), k[e]);
    cpu::from_float(0.01f * static_cast<float>(e % 29), v[e]);
  }
  const cpu::ContiguousRows<cpu::BF16Bits> rows{k.data(), v.data(), 128};
  const cpu::AttendShape sh{2, 4, 64};
  std::vector<float> q(sh.q_dim(), 0.1f), acc(sh.q_dim()), mx(8), sum(8);
  std::vector<float> scratch(cpu::attend_span_scratch_floats(8, 64));
  double best = 1e30;
  for (int r = 0; r < 200; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::attend_span<cpu::BF16Bits>(q.data(), rows, 0, 256, sh, 0, 2, acc.data(), mx.data(),
                                    sum.data(), scratch.data());
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  omp_set_num_threads(threads);
  const double direct = 256.0 * 8 * (2 * 64 + 2 * 64) / best;
  // Within 2x either way: the host's noise, not a wrong count or the wrong loops.
  EXPECT_GT(measured, direct / 2) << "direct " << direct / 1e9 << " GFLOP/s";
  EXPECT_LT(measured, direct * 2) << "direct " << direct / 1e9 << " GFLOP/s";
}

}  // namespace
}  // namespace kvheap
