// Chapter 3's claims on the CPU: paged attention is bitwise equal to the contiguous reservation for
// any block size with shuffled blocks, and the allocator accounts for every block through any
// sequence of admit, append and free, including exhaustion.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "base/error.hpp"
#include "chapters/01_cpu_reference/reserved_cache.hpp"
#include "chapters/03_paged_blocks/block_manager.hpp"
#include "chapters/03_paged_blocks/capacity.hpp"
#include "chapters/03_paged_blocks/paged_cache.hpp"
#include "common/forward/forward_cpu.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/program/kv_budget.hpp"
#include "common/serving/sampler.hpp"
#include "common/serving/serve.hpp"
#include "common/model/synthetic_weights.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

using ch03::BlockManager;
using ch03::PagedCache;

/// Runs three sequences of different prompt lengths together, prefill then greedy decode
/// (tokens chosen from the contiguous run, so both caches see identical inputs), and checks
/// that every step's logits are bitwise identical.
void expect_paged_bitwise_equal(const ModelWeights& w, int block_size, DType kv, int steps) {
  const ModelConfig& c = w.config;
  const std::vector<std::vector<int>> prompts = {{1, 5, 9, 2, 77, 31, 4}, {1}, {1, 60, 61, 62}};
  ch01::ReservedCache contiguous(c, kv);
  PagedCache paged(c, kv, 256, block_size, /*shuffle_seed=*/block_size * 7919 + 1, Memory::kHost);
  CpuForward fwd(w);
  std::vector<int> cslots, pslots;
  Batch cb, pb;
  for (std::size_t s = 0; s < prompts.size(); ++s) {
    cslots.push_back(contiguous.admit());
    pslots.push_back(paged.blocks().allocate());
    for (std::size_t p = 0; p < prompts[s].size(); ++p) {
      const bool last = p + 1 == prompts[s].size();
      cb.rows.push_back({prompts[s][p], cslots[s], static_cast<int>(p), last});
      pb.rows.push_back({prompts[s][p], pslots[s], static_cast<int>(p), last});
    }
  }
  const int V = c.vocab_size;
  for (int step = 0; step < steps; ++step) {
    const auto lc = fwd.forward(cb, contiguous);
    const std::vector<float> want(lc.begin(), lc.end());
    const auto lp = fwd.forward(pb, paged);
    ASSERT_EQ(lp.size(), want.size());
    ASSERT_EQ(std::memcmp(lp.data(), want.data(), want.size() * sizeof(float)), 0)
        << "block size " << block_size << ", step " << step << ": paged logits differ";
    Batch nc, np;
    for (std::size_t s = 0; s < prompts.size(); ++s) {
      const int next = argmax(std::span<const float>(&want[s * V], V));
      const int pos = contiguous.length(cslots[s]);
      nc.rows.push_back({next, cslots[s], pos, true});
      np.rows.push_back({next, pslots[s], pos, true});
    }
    cb = nc;
    pb = np;
  }
  paged.blocks().check_invariants();
}

TEST(Ch03PagedBlocks, PagedLogitsBitwiseEqualContiguousTiny) {
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 4);
  for (int bs : {1, 3, 7, 16, 17, 64}) expect_paged_bitwise_equal(w, bs, DType::F32, 12);
  expect_paged_bitwise_equal(w, 5, DType::BF16, 6);
  expect_paged_bitwise_equal(w, 5, DType::F16, 6);
}

TEST(Ch03PagedBlocks, PagedLogitsBitwiseEqualContiguousStories260K) {
  KVHEAP_REQUIRE_MODEL(path, "stories260K.bin");
  const ModelWeights w = load_llama2c(path);
  for (int bs : {1, 3, 7, 16, 17, 64}) expect_paged_bitwise_equal(w, bs, DType::F32, 20);
}

TEST(Ch03PagedBlocks, ShuffledPoolHandsOutNonContiguousBlocks) {
  BlockManager m(64, 4, 99);
  const int s = m.allocate(64 * 4);  // every block
  const auto& t = m.page_table(s);
  int ascending_pairs = 0;
  for (std::size_t i = 1; i < t.size(); ++i) ascending_pairs += t[i] == t[i - 1] + 1;
  EXPECT_LT(ascending_pairs, 10) << "a shuffled pool should not hand out runs of blocks";
  EXPECT_EQ(std::set<int>(t.begin(), t.end()).size(), 64u);
}

// Random admit / append / free across many sequences, checked after every operation against a
// plain model of what each sequence should hold.
TEST(Ch03PagedBlocks, AllocatorPropertyRandomOperations) {
  for (int bs : {1, 3, 16}) {
    BlockManager m(97, bs, 1234 + bs);
    std::map<int, int> model;                   // seq -> length
    std::map<std::int64_t, int> owner_of_slot;  // every held position's slot -> its sequence
    std::mt19937 rng(42 + bs);
    for (int op = 0; op < 5000; ++op) {
      const int kind = static_cast<int>(rng() % 10);
      if (kind < 2) {  // admit with a random prompt reservation
        const int tokens = static_cast<int>(rng() % (4 * bs + 1));
        if (m.can_allocate(tokens)) {
          const int s = m.allocate(tokens);
          int lowest_free = 0;  // ids are reused lowest first, however they were freed
          while (model.count(lowest_free)) ++lowest_free;
          EXPECT_EQ(s, lowest_free);
          model[s] = 0;
        } else {
          const int free_before = m.pool().num_free();
          EXPECT_THROW((void)m.allocate(tokens), ResourceError);
          EXPECT_EQ(m.pool().num_free(), free_before) << "a failed admission changed the pool";
        }
      } else if (kind < 9 && !model.empty()) {  // append to a random live sequence
        auto it = model.begin();
        std::advance(it, rng() % model.size());
        if (m.can_append(it->first)) {
          const std::int64_t slot = m.append_slot(it->first);
          // No two held positions may share a slot: that is a block handed out twice.
          EXPECT_TRUE(owner_of_slot.emplace(slot, it->first).second)
              << "slot " << slot << " already holds a position of sequence " << owner_of_slot[slot];
          EXPECT_LT(slot, std::int64_t{97} * bs);
          ++it->second;
        } else {
          EXPECT_THROW((void)m.append_slot(it->first), ResourceError);
        }
      } else if (!model.empty()) {  // finish a random sequence
        auto it = model.begin();
        std::advance(it, rng() % model.size());
        m.free(it->first);
        std::erase_if(owner_of_slot, [&](const auto& e) { return e.second == it->first; });
        model.erase(it);
      }
      ASSERT_NO_THROW(m.check_invariants()) << "after operation " << op;
      std::size_t tokens = 0;
      for (auto [s, len] : model) {
        ASSERT_EQ(m.length(s), len);
        tokens += len;
      }
      ASSERT_EQ(m.tokens_held(), tokens);
      ASSERT_EQ(m.pool().num_used() + m.pool().num_free(), 97);
    }
    for (auto [s, len] : model) m.free(s);
    EXPECT_EQ(m.pool().num_free(), 97) << "blocks leaked once every sequence finished";
    m.check_invariants();
  }
}

TEST(Ch03PagedBlocks, ExhaustionIsRecoverable) {
  BlockManager m(4, 2, 7);
  const int a = m.allocate(5);  // 3 blocks
  EXPECT_FALSE(m.can_allocate(3));
  try {
    (void)m.allocate(3);
    FAIL();
  } catch (const ResourceError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 2 blocks"), std::string::npos) << e.what();
  }
  const int b = m.allocate(1);
  for (int i = 0; i < 2; ++i) (void)m.append_slot(b);  // fills b's block
  EXPECT_FALSE(m.can_append(b));
  EXPECT_THROW((void)m.append_slot(b), ResourceError);
  EXPECT_EQ(m.length(b), 2) << "a failed append must not change the sequence";
  m.check_invariants();
  m.free(a);
  EXPECT_TRUE(m.can_append(b));
  (void)m.append_slot(b);
  m.free(b);
  EXPECT_EQ(m.pool().num_free(), 4);
  EXPECT_THROW(m.free(b), InputError) << "double free";
}

// A batch the pool cannot hold throws before any sequence grows: resuming from length() must not
// find positions that were counted but never written.
TEST(Ch03PagedBlocks, ExhaustedBatchChangesNothing) {
  BlockManager m(4, 2, 5);
  const int s = m.allocate();
  Batch b;
  for (int p = 0; p < 3; ++p) b.rows.push_back({1, s, p, false});
  (void)ch03::paged_view(m, b);  // 3 positions: 2 blocks
  Batch more;
  for (int p = 3; p < 9; ++p) more.rows.push_back({1, s, p, false});  // needs a fifth block
  EXPECT_THROW((void)ch03::paged_view(m, more), ResourceError);
  EXPECT_EQ(m.length(s), 3);
  EXPECT_EQ(m.page_table(s).size(), 2u);
  EXPECT_EQ(m.pool().num_free(), 2);
  m.check_invariants();
  more.rows.pop_back();  // positions 3..7: exactly the four blocks
  (void)ch03::paged_view(m, more);
  EXPECT_EQ(m.length(s), 8);
  EXPECT_EQ(m.pool().num_free(), 0);
  m.check_invariants();
}

// Each position of a sequence is written once per batch, in order; a gap or a repeat is an input
// error that changes nothing, and a rewrite of a held position takes the slot it already has.
TEST(Ch03PagedBlocks, BatchPositionsMustBeContiguousAndIncreasing) {
  BlockManager m(8, 4, 3);
  const int s = m.allocate();
  const std::vector<std::vector<int>> bad = {{0, 0}, {1}, {0, 2}, {1, 0}};
  for (const auto& positions : bad) {
    Batch b;
    for (int p : positions) b.rows.push_back({1, s, p, false});
    EXPECT_THROW((void)ch03::paged_view(m, b), InputError) << positions.size();
    EXPECT_EQ(m.length(s), 0);
    EXPECT_EQ(m.pool().num_free(), 8);
  }
  Batch b;
  for (int p = 0; p < 5; ++p) b.rows.push_back({1, s, p, false});
  const KVView first = ch03::paged_view(m, b);
  Batch again;  // rewrite positions 3 and 4, then append 5
  for (int p = 3; p < 6; ++p) again.rows.push_back({1, s, p, false});
  const KVView second = ch03::paged_view(m, again);
  EXPECT_EQ(second.slot_mapping[0], first.slot_mapping[3]);
  EXPECT_EQ(second.slot_mapping[1], first.slot_mapping[4]);
  EXPECT_EQ(m.length(s), 6);
  m.check_invariants();
}

// Reference counts, which chapter 4's sharing builds on: a block goes back on the free list with
// its last reference, not its first, and a free block can be neither shared nor freed again.
TEST(Ch03PagedBlocks, SharedBlocksReturnToThePoolWithTheirLastReference) {
  ch03::BlockPool pool(3, 4);
  const int b = pool.allocate();
  pool.retain(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(pool.num_free(), 2);
  pool.check_invariants();
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 3);
  pool.check_invariants();
  EXPECT_THROW(pool.retain(b), InputError);
  EXPECT_THROW(pool.release(b), InputError);
  EXPECT_THROW(pool.retain(7), InputError);
}

TEST(Ch03PagedBlocks, TokenCountsAreCheckedAndCeiled) {
  BlockManager m(4, 16);
  EXPECT_EQ(m.blocks_for(0), 0);
  EXPECT_EQ(m.blocks_for(16), 1);
  EXPECT_EQ(m.blocks_for(17), 2);
  EXPECT_EQ(m.blocks_for(std::numeric_limits<long>::max()),
            std::numeric_limits<long>::max() / 16 + 1);
  EXPECT_THROW((void)m.blocks_for(-100), InputError);
  EXPECT_THROW((void)m.allocate(-1), InputError);
  EXPECT_FALSE(m.can_allocate(std::numeric_limits<long>::max()));
  EXPECT_THROW((void)m.allocate(std::numeric_limits<long>::max()), ResourceError);
  EXPECT_EQ(m.pool().num_free(), 4);
  m.check_invariants();
}

// What the admission of chapter 3 counts: the last generated token is never fed back.
TEST(Ch03PagedBlocks, AGenerationStoresPromptPlusNewMinusOnePositions) {
  EXPECT_EQ(positions_stored(8, 9), 16);
  EXPECT_EQ(positions_stored(8, 1), 8);
  EXPECT_EQ(positions_stored(8, 0), 0);
}

// Draws beyond what an int holds clip to the longest request; converted to int first, they
// wrapped and then clipped to 1.
TEST(Ch03PagedBlocks, LognormalLengthsClipHugeDrawsToTheLongest) {
  for (int len : ch03::lognormal_lengths(100, 1e15, 0.01, 4096, 1)) EXPECT_EQ(len, 4096);
  EXPECT_THROW((void)ch03::lognormal_lengths(10, 400, 1.0, 0, 1), UsageError);
  EXPECT_THROW((void)ch03::lognormal_lengths(10, -1, 1.0, 100, 1), UsageError);
  EXPECT_THROW((void)ch03::lognormal_lengths(10, 400, 0.0, 100, 1), UsageError);
  EXPECT_THROW(
      (void)ch03::lognormal_lengths(10, std::numeric_limits<double>::infinity(), 1.0, 100, 1),
      UsageError);
}

TEST(Ch03PagedBlocks, BudgetTooSmallForOneSequenceIsRejected) {
  const ModelConfig c = preset("tiny");
  const std::size_t per_token = kv_bytes_per_token(c, DType::F32);
  EXPECT_EQ(blocks_for_budget(c, DType::F32, 10 * 16 * per_token, 16), 10);
  EXPECT_THROW((void)blocks_for_budget(c, DType::F32, 15 * per_token, 16), ResourceError);
  EXPECT_THROW((void)blocks_for_budget(c, DType::F32, 10 * 16 * per_token, 16, 200), ResourceError);
  EXPECT_THROW((void)blocks_for_budget(c, DType::F32, 1 << 20, 0), UsageError);
}

// The chapter's capacity claim at a fixed budget: request lengths lognormal with mean 400
// (max 4096), Llama-3-8B bf16, 16 GiB. Paging admits at least 2.5x as many requests as a
// max_seq_len reservation, and wastes at most 4 % of what it holds at block size 16.
TEST(Ch03PagedBlocks, PagedAdmitsTwoAndAHalfTimesMoreWithUnderFourPercentWaste) {
  const auto lengths = ch03::lognormal_lengths(20000, 400.0, 1.0, 4096, 2024);
  double mean = 0;
  for (int l : lengths) mean += l;
  mean /= lengths.size();
  EXPECT_NEAR(mean, 400.0, 20.0) << "the length distribution is not the stated one";
  const auto r = ch03::admit_until_full(preset("llama-3-8b"), DType::BF16, std::size_t{16} << 30,
                                        16, 4096, lengths);
  EXPECT_GE(r.admitted_paged, 2.5 * r.admitted_contiguous)
      << r.admitted_paged << " paged vs " << r.admitted_contiguous << " contiguous";
  EXPECT_LE(r.waste_paged, 0.04);
  EXPECT_GT(r.waste_contiguous, 0.5);
}

}  // namespace
}  // namespace kvheap
