// Chapter 4's claims about its allocator: forked sequences share every block until one of them
// writes, and then only the written block is copied; a prompt whose leading blocks are cached
// takes them instead of computing them again; cached blocks are evicted, least recently used and
// tail first, only when nothing else is free; and through any sequence of admit, fork, append and
// free every slot a sequence reads holds exactly its own token and every block is accounted for.
//
// And its claim about the model's output: sequences that share blocks, by fork or through the
// prefix index, compute the logits they would compute alone (chapter 3, every prompt prefilled in
// full), although the positions they share were computed once, in another sequence's batch.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "chapters/03_paged_blocks/paged_cache.hpp"
#include "chapters/04_cow_prefix_sharing/shared_block_manager.hpp"
#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "common/forward/forward_cpu.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/model/synthetic_weights.hpp"
#include "common/serving/sampler.hpp"
#include "common/serving/serve.hpp"
#include "tests/chapters/ch04_scenario.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

using ch04::BlockCopy;
using ch04::SharedBlockManager;

/// Appends `tokens` to `seq` one at a time and returns their slots.
std::vector<std::int64_t> append_all(SharedBlockManager& m, int seq,
                                     const std::vector<int>& tokens) {
  std::vector<std::int64_t> slots;
  for (int t : tokens) slots.push_back(m.append_slot(seq, t));
  return slots;
}

std::vector<int> iota_tokens(int n, int first = 1) {
  std::vector<int> t(n);
  for (int i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

TEST(Ch04CowPrefixSharing, ForkSharesEveryBlockAndCopiesOnlyTheLastOnWrite) {
  SharedBlockManager m(16, 4, 11);
  const int parent = m.allocate();
  append_all(m, parent, iota_tokens(10));  // blocks of 4, 4 and 2 positions
  ASSERT_TRUE(m.take_copies().empty());
  const std::vector<int> pages = m.page_table(parent);
  const int used = m.pool().num_used();
  const int child = m.fork(parent);
  EXPECT_EQ(m.page_table(child), pages);
  EXPECT_EQ(m.tokens(child), m.tokens(parent));
  EXPECT_EQ(m.pool().num_used(), used) << "a fork must not take a block";
  EXPECT_EQ(m.pool().ref_count(pages[2]), 2);
  EXPECT_EQ(m.pool().ref_count(pages[0]), 3) << "two sequences and the prefix index";

  // The child writes position 10, inside the shared last block: it gets a copy of 2 positions.
  const std::int64_t slot = m.append_slot(child, 99);
  const std::vector<BlockCopy> copies = m.take_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, pages[2]);
  EXPECT_EQ(copies[0].slots, 2);
  EXPECT_EQ(m.page_table(child)[2], copies[0].dst);
  EXPECT_NE(copies[0].dst, pages[2]);
  EXPECT_EQ(slot, std::int64_t{copies[0].dst} * 4 + 2);
  EXPECT_EQ(m.page_table(parent), pages) << "the parent keeps its blocks";
  EXPECT_EQ(m.page_table(child)[0], pages[0]) << "full blocks stay shared";
  EXPECT_EQ(m.pool().ref_count(pages[2]), 1);
  EXPECT_EQ(m.counters().copies_on_write, 1);

  // The parent now owns its last block alone: it writes in place.
  EXPECT_EQ(m.append_slot(parent, 7), std::int64_t{pages[2]} * 4 + 2);
  EXPECT_TRUE(m.take_copies().empty());
  m.check_invariants();
  EXPECT_EQ(m.blocks_held(), 4);
  EXPECT_EQ(m.blocks_referenced(), 6);
}

TEST(Ch04CowPrefixSharing, ForkAtABlockBoundaryCopiesNothing) {
  SharedBlockManager m(8, 4, 3);
  const int a = m.allocate();
  append_all(m, a, iota_tokens(8));
  const int b = m.fork(a);
  (void)m.append_slot(b, 50);
  (void)m.append_slot(a, 60);
  EXPECT_TRUE(m.take_copies().empty());
  EXPECT_EQ(m.counters().copies_on_write, 0);
  EXPECT_NE(m.page_table(a)[2], m.page_table(b)[2]);
  m.check_invariants();
}

TEST(Ch04CowPrefixSharing, APromptTakesTheCachedBlocksOfItsLongestIndexedPrefix) {
  SharedBlockManager m(32, 4, 5);
  const std::vector<int> first = iota_tokens(10);
  const int a = m.allocate(first);
  EXPECT_EQ(m.length(a), 0) << "nothing cached yet";
  append_all(m, a, first);  // indexes blocks [1..4] and [5..8]

  std::vector<int> second = iota_tokens(8);  // the same two full blocks, then its own
  second.insert(second.end(), {70, 71, 72});
  EXPECT_EQ(m.cached_blocks(second), 2);
  const int b = m.allocate(second);
  EXPECT_EQ(m.length(b), 8);
  EXPECT_EQ(m.tokens(b), iota_tokens(8));
  EXPECT_EQ(m.page_table(b),
            std::vector<int>(m.page_table(a).begin(), m.page_table(a).begin() + 2));
  EXPECT_EQ(m.counters().tokens_reused, 8);
  append_all(m, b, {70, 71, 72});
  EXPECT_TRUE(m.take_copies().empty()) << "cached full blocks are never written, so never copied";

  // A prompt of exactly two cached blocks reuses one: its last token must be computed for its
  // logits, and that token lives in the second block.
  EXPECT_EQ(m.cached_blocks(iota_tokens(8)), 1);
  EXPECT_EQ(m.cached_blocks(iota_tokens(9)), 2);
  EXPECT_EQ(m.cached_blocks({}), 0);
  m.check_invariants();
}

// A block is named by the whole prefix it continues: equal tokens after a different beginning
// hold different keys and values, so they must not match.
TEST(Ch04CowPrefixSharing, EqualBlocksAfterDifferentPrefixesDoNotMatch) {
  SharedBlockManager m(16, 2, 9);
  const int a = m.allocate();
  append_all(m, a, {1, 2, 3, 4, 5});
  EXPECT_EQ(m.cached_blocks(std::vector<int>{9, 2, 3, 4, 5}), 0);
  EXPECT_EQ(m.cached_blocks(std::vector<int>{1, 2, 3, 9, 5}), 1);
  EXPECT_EQ(m.cached_blocks(std::vector<int>{1, 2, 3, 4, 5}), 2);
}

TEST(Ch04CowPrefixSharing, CachedBlocksOutliveTheirSequenceAndAreEvictedTailFirstWhenNeeded) {
  SharedBlockManager m(4, 2, 0);
  const std::vector<int> prompt = {1, 2, 3, 4, 5, 6};
  const int a = m.allocate(prompt);
  append_all(m, a, prompt);  // three full blocks, all indexed
  const std::vector<int> pages = m.page_table(a);
  m.free(a);
  EXPECT_EQ(m.pool().num_used(), 3) << "finished, but still cached";
  EXPECT_EQ(m.index().num_evictable(), 3u);
  EXPECT_EQ(m.num_available(), 4);
  EXPECT_EQ(m.slots_stored(), 6u);
  m.check_invariants();

  // Another prompt needs two blocks: one is free, the other is the evicted tail of the cache.
  const int b = m.allocate();
  append_all(m, b, {9, 9, 9});
  EXPECT_EQ(m.counters().evictions, 1);
  EXPECT_FALSE(m.index().contains(pages[2])) << "the tail goes first";
  EXPECT_TRUE(m.index().contains(pages[0]));
  std::vector<int> again = prompt;
  again.push_back(7);
  EXPECT_EQ(m.cached_blocks(again), 2) << "the head of the prefix is still cached";
  const int c = m.allocate(again);
  EXPECT_EQ(m.length(c), 4);
  EXPECT_EQ(m.index().num_evictable(), 0u) << "blocks a sequence took are not evictable";
  m.check_invariants();
  m.free(b);
  m.free(c);
  m.check_invariants();
  EXPECT_EQ(m.pool().num_used(), static_cast<int>(m.index().size()));
}

TEST(Ch04CowPrefixSharing, AnEvictedBlockHandsItsIndexEntryToALiveCopy) {
  // Two prompts that begin alike, prefilled side by side: both compute their first block, the
  // first to fill it is indexed and the other's joins its key as a copy.
  SharedBlockManager m(5, 2, 0);
  const int a = m.allocate();
  const int b = m.allocate();
  append_all(m, a, {1, 2});
  append_all(m, b, {1, 2});
  const int original = m.page_table(a)[0];
  const int copy = m.page_table(b)[0];
  ASSERT_NE(original, copy);
  EXPECT_TRUE(m.index().contains(original));
  EXPECT_FALSE(m.index().contains(copy));
  m.free(a);                 // the original is now only cached
  append_all(m, b, {3, 4});  // indexed after the copy's chain
  m.check_invariants();

  // Fill the pool so the original is evicted; b still lives and holds the same content.
  const int c = m.allocate();
  append_all(m, c, {9, 9, 9, 9, 9, 9});
  EXPECT_EQ(m.counters().evictions, 1);
  const std::vector<int> first = {1, 2};
  ASSERT_TRUE(m.index().find(ch04::PrefixIndex::kRoot, first));
  EXPECT_EQ(m.index().find(ch04::PrefixIndex::kRoot, first)->block, copy)
      << "the entry moved to the copy (block " << original << " went back to the pool)";
  m.check_invariants();
  EXPECT_EQ(m.cached_blocks(std::vector<int>{1, 2, 3, 4, 5}), 2)
      << "the chain through the evicted block is still reachable";
  const int d = m.allocate(std::vector<int>{1, 2, 3, 4, 5});
  EXPECT_EQ(m.page_table(d), m.page_table(b));
  m.free(b);
  m.free(c);
  m.free(d);
  m.check_invariants();
  EXPECT_EQ(m.pool().num_used(), static_cast<int>(m.index().size()));
}

TEST(Ch04CowPrefixSharing, AnEvictedBlockWithSeveralCopiesHandsItsEntryToOneAndKeepsTheOthers) {
  // Three sequences compute the same first block; the first is indexed, the other two are copies,
  // and one copy is forked (a copy held twice).
  SharedBlockManager m(8, 2, 0);
  const int a = m.allocate(), b = m.allocate(), c = m.allocate();
  for (int s : {a, b, c}) append_all(m, s, {1, 2});
  const int b2 = m.fork(b);
  const int original = m.page_table(a)[0];
  m.free(a);
  m.check_invariants();
  // Fill the rest of the pool so the original is evicted.
  const int filler = m.allocate();
  append_all(m, filler, std::vector<int>(12, 9));
  EXPECT_EQ(m.counters().evictions, 1);
  const std::vector<int> first = {1, 2};
  const auto hit = m.index().find(ch04::PrefixIndex::kRoot, first);
  ASSERT_TRUE(hit);
  EXPECT_TRUE(hit->block == m.page_table(b)[0] || hit->block == m.page_table(c)[0])
      << "the entry of block " << original << " moved to one of its copies";
  m.check_invariants();
  // The heir's holders finish; the entry stays (the index holds it), and the other copy can
  // still inherit it later.
  m.free(b);
  m.free(b2);
  m.free(c);
  m.free(filler);
  m.check_invariants();
  EXPECT_EQ(m.cached_blocks(std::vector<int>{1, 2, 3}), 1);
  EXPECT_EQ(m.pool().num_used(), static_cast<int>(m.index().size()));
}

TEST(Ch04CowPrefixSharing, ExhaustionIsAnErrorThatChangesNothing) {
  SharedBlockManager m(3, 2, 1);
  const int a = m.allocate();
  append_all(m, a, {1, 2, 3});  // two blocks, the second half full
  const int b = m.fork(a);
  const int c = m.allocate();
  append_all(m, c, {8, 8});  // the third and last block (indexed, but c holds it)
  EXPECT_EQ(m.num_available(), 0);
  EXPECT_FALSE(m.can_append(b)) << "its last block is shared, so appending needs a copy";
  EXPECT_THROW((void)m.append_slot(b, 4), ResourceError);
  EXPECT_EQ(m.length(b), 3);
  EXPECT_TRUE(m.take_copies().empty());
  m.check_invariants();

  Batch batch;
  batch.rows.push_back({4, a, 3, true});
  batch.rows.push_back({5, b, 3, true});
  try {
    (void)ch04::shared_view(m, batch);
    ADD_FAILURE() << "a batch needing a copy of a shared block with no block available ran";
  } catch (const ResourceError& e) {
    // One copy, not two: when a and b both append, the second finds the block unshared.
    EXPECT_NE(std::string(e.what()).find("needs 1 block of 2 slots"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(m.length(a), 3);
  EXPECT_EQ(m.length(b), 3);
  m.free(c);  // its block stays cached and can now be evicted for the copy
  const ch04::SharedView sb = ch04::shared_view(m, batch);
  EXPECT_EQ(sb.copies.size(), 1u);
  EXPECT_EQ(m.counters().evictions, 1);
  m.check_invariants();
}

TEST(Ch04CowPrefixSharing, AHeldPositionIsNeverRewritten) {
  SharedBlockManager m(8, 4, 2);
  const int a = m.allocate();
  append_all(m, a, {1, 2, 3});
  for (const std::vector<int>& positions : {std::vector<int>{2}, {4}, {3, 3}, {3, 5}}) {
    Batch b;
    for (int p : positions) b.rows.push_back({1, a, p, false});
    EXPECT_THROW((void)ch04::shared_view(m, b), InputError);
    EXPECT_EQ(m.length(a), 3);
  }
  Batch unknown;
  unknown.rows.push_back({1, 5, 0, false});
  EXPECT_THROW((void)ch04::shared_view(m, unknown), InputError);
  EXPECT_THROW((void)m.fork(5), InputError);
  m.free(a);
  EXPECT_THROW(m.free(a), InputError) << "double free";
  m.check_invariants();
}

// Random admit (of prompts that start alike, so prefixes repeat), fork, append and free,
// with a stand-in for the storage: each slot holds the token written to it, copies included.
// After every operation each live sequence's every position must read back its own token: a
// block shared without copy-on-write, reused from the index with other contents, or evicted while
// held would show up here.
TEST(Ch04CowPrefixSharing, RandomOperationsReadBackEveryTokenAndAccountForEveryBlock) {
  for (int bs : {1, 2, 3, 8}) {
    const int num_blocks = 61;
    SharedBlockManager m(num_blocks, bs, 77 + bs);
    std::vector<int> storage(static_cast<std::size_t>(num_blocks) * bs, -1);  // slot -> token
    std::map<int, std::vector<int>> model;                                    // seq -> its tokens
    std::mt19937 rng(2024 + bs);
    auto store = [&](std::int64_t slot, int token) {
      for (const BlockCopy& c : m.take_copies())
        for (int i = 0; i < c.slots; ++i) storage[c.dst * bs + i] = storage[c.src * bs + i];
      storage[slot] = token;
    };
    auto random_seq = [&] {
      auto it = model.begin();
      std::advance(it, rng() % model.size());
      return it->first;
    };
    std::vector<std::vector<int>> bases(3, std::vector<int>(4 * bs));
    for (auto& base : bases)
      for (int& t : base) t = static_cast<int>(rng() % 3);
    long reused = 0;
    for (int op = 0; op < 4000; ++op) {
      const int kind = static_cast<int>(rng() % 12);
      if (kind < 2) {  // admit the start of one of three prompts, up to 4 blocks long
        const std::vector<int>& base = bases[rng() % bases.size()];
        std::vector<int> prompt(base.begin(), base.begin() + rng() % (base.size() + 1));
        const long cached = m.cached_blocks(prompt);
        const int s = m.allocate(prompt);
        ASSERT_EQ(m.length(s), cached * bs);
        reused += cached * bs;
        model[s].assign(prompt.begin(), prompt.begin() + cached * bs);
        // Its prefill: the rest of the prompt, as far as the pool allows.
        for (std::size_t p = cached * bs; p < prompt.size() && m.can_append(s); ++p) {
          store(m.append_slot(s, prompt[p]), prompt[p]);
          model[s].push_back(prompt[p]);
        }
      } else if (kind < 3 && !model.empty()) {
        const int parent = random_seq();
        const int child = m.fork(parent);
        ASSERT_FALSE(model.count(child));
        model[child] = model[parent];
      } else if (kind < 10 && !model.empty()) {
        const int s = random_seq();
        const int token = static_cast<int>(rng() % 3);
        if (m.can_append(s)) {
          store(m.append_slot(s, token), token);
          model[s].push_back(token);
        } else {
          EXPECT_THROW((void)m.append_slot(s, token), ResourceError);
        }
      } else if (!model.empty()) {
        const int s = random_seq();
        m.free(s);
        model.erase(s);
      }
      ASSERT_NO_THROW(m.check_invariants()) << "block size " << bs << ", operation " << op;
      for (const auto& [s, tokens] : model) {
        ASSERT_EQ(m.tokens(s), tokens);
        for (int p = 0; p < static_cast<int>(tokens.size()); ++p)
          ASSERT_EQ(storage[m.slot_of(s, p)], tokens[p])
              << "block size " << bs << ", operation " << op << ": sequence " << s
              << " reads another token at position " << p;
      }
      ASSERT_LE(m.slots_stored(), static_cast<std::size_t>(m.pool().num_used()) * bs);
      // Every full block a live sequence holds can be found again from its tokens, whoever
      // computed it first and whatever was evicted since.
      for (const auto& [s, tokens] : model) {
        std::vector<int> next = tokens;
        next.push_back(0);
        ASSERT_EQ(m.cached_blocks(next), static_cast<long>(tokens.size()) / bs)
            << "block size " << bs << ", operation " << op << ": sequence " << s
            << " holds full blocks the prefix index cannot reach";
      }
    }
    EXPECT_EQ(m.counters().tokens_reused, reused);
    if (bs > 1) {  // blocks of one position are never shared partly filled
      EXPECT_GT(m.counters().copies_on_write, 0) << "block size " << bs << ": no copy-on-write";
    }
    EXPECT_GT(reused, 0) << "block size " << bs << ": no cached prefix was reused";
    EXPECT_GT(m.counters().evictions, 0) << "block size " << bs << ": nothing was evicted";
    for (const auto& [s, tokens] : model) m.free(s);
    m.check_invariants();
    EXPECT_EQ(m.pool().num_used(), static_cast<int>(m.index().size()))
        << "once every sequence finished, only cached blocks may be in use";
  }
}

/// Chapter 4 over host memory against chapter 3 over host memory.
double shared_vs_unshared(const ModelWeights& w, DType kv, int block_size,
                          const std::vector<int>& pa, const std::vector<int>& pb, int steps) {
  CpuForward fwd(w);
  ch04::SharedCache shared(w.config, kv, 64, block_size, 101, /*read_once=*/true, Memory::kHost);
  ch03::PagedCache alone(w.config, kv, 64, block_size, 202, Memory::kHost);
  return test::shared_vs_unshared(fwd, shared, alone, w.config, block_size, pa, pb, steps);
}

TEST(Ch04CowPrefixSharing, SharedLogitsMatchUnsharedTiny) {
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 4);
  const std::vector<int> pa = {1, 5, 9, 2, 77, 31, 4, 8, 3, 12, 40};
  std::vector<int> pb(pa.begin(), pa.begin() + 8);
  pb.insert(pb.end(), {60, 61, 62});
  for (int bs : {1, 3, 4, 8})
    EXPECT_LE(shared_vs_unshared(w, DType::F32, bs, pa, pb, 10), 1e-5) << bs;
  EXPECT_LE(shared_vs_unshared(w, DType::BF16, 4, pa, pb, 6), 1e-5);
}

TEST(Ch04CowPrefixSharing, SharedLogitsMatchUnsharedStories260K) {
  KVHEAP_REQUIRE_MODEL(path, "stories260K.bin");
  const ModelWeights w = load_llama2c(path);
  const std::vector<int> pa = {1, 403, 407, 261, 378, 271, 420, 306, 422, 259, 267, 373, 10};
  std::vector<int> pb(pa.begin(), pa.begin() + 9);
  pb.insert(pb.end(), {280, 295});
  EXPECT_LE(shared_vs_unshared(w, DType::F32, 4, pa, pb, 24), 1e-5);
}

}  // namespace
}  // namespace kvheap
