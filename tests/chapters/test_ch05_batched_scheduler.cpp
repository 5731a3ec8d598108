// Chapter 5's claims about its scheduler, without a model: a request is admitted when its next
// chunk fits, not its worst case; decode rows go first and no batch exceeds the token budget; when
// the pool runs dry the newest request is preempted and later recomputed from the blocks the
// prefix index kept; and through random arrivals, lengths and pool sizes every batch fits, every
// request finishes with its own tokens in its slots, and every block comes back.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include "base/error.hpp"
#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "chapters/05_batched_scheduler/scheduler.hpp"

namespace kvheap {
namespace {

using ch04::SharedBlockManager;
using ch05::RequestState;
using ch05::Scheduler;

/// Runs a planned batch the way a sharing cache's prepare() does: every row appended to its
/// sequence (ResourceError if the pool cannot hold them).
void run(SharedBlockManager& m, const StepPlan& plan) { (void)ch04::shared_view(m, plan.batch); }

std::vector<int> iota_tokens(int n, int first = 1) {
  std::vector<int> t(n);
  for (int i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

TEST(Ch05BatchedScheduler, AdmitsARequestWhenItsFirstChunkFitsNotItsWorstCase) {
  // 6 blocks of 4: the worst case of each request (8 prompt + 15 new -> 6 blocks) is the whole
  // pool, so admission by worst case would run one at a time. By chunk, both start at once.
  SharedBlockManager m(6, 4, 0);
  Scheduler s(m, {.max_batch_tokens = 16, .max_running = 8});
  const int a = s.submit(iota_tokens(8), 16);
  const int b = s.submit(iota_tokens(8, 50), 16);
  const StepPlan p = s.schedule();
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(p.prefill_rows, 16);
  ASSERT_EQ(p.logit_requests, (std::vector<int>{a, b}));
  run(m, p);
  EXPECT_EQ(m.pool().num_used(), 4);
}

TEST(Ch05BatchedScheduler, DecodeRowsComeFirstAndNoBatchExceedsTheBudget) {
  SharedBlockManager m(64, 4, 0);
  Scheduler s(m, {.max_batch_tokens = 5, .max_running = 8});
  const int a = s.submit(iota_tokens(3), 8);
  StepPlan p = s.schedule();
  ASSERT_EQ(p.batch.size(), 3);
  run(m, p);
  s.append(a, 7);
  const int b = s.submit(iota_tokens(9, 20), 8);
  // a decodes (1 row); b's 9-position prompt is cut to the 4 rows left, without logits.
  p = s.schedule();
  ASSERT_EQ(p.batch.size(), 5);
  EXPECT_EQ(p.batch.rows[0].token, 7);
  EXPECT_EQ(p.batch.rows[0].pos, 3);
  EXPECT_EQ(p.decode_rows, 1);
  EXPECT_EQ(p.prefill_rows, 4);
  EXPECT_EQ(p.logit_requests, std::vector<int>{a});
  run(m, p);
  s.append(a, 8);
  p = s.schedule();  // a decodes, b continues at position 4
  ASSERT_EQ(p.batch.size(), 5);
  EXPECT_EQ(p.batch.rows[1].pos, 4);
  EXPECT_EQ(p.batch.rows[1].seq, p.batch.rows[4].seq);
  EXPECT_EQ(p.logit_requests, std::vector<int>{a});
  run(m, p);
  s.append(a, 9);
  p = s.schedule();  // b's last position: its first logit row
  EXPECT_EQ(p.logit_requests, (std::vector<int>{a, b}));
  EXPECT_EQ(p.batch.size(), 2);
}

TEST(Ch05BatchedScheduler, PreemptsTheNewestAndRecomputesItFromItsCachedBlocks) {
  // 5 blocks of 2. a and b each fill 2 blocks with their prompt; the one block left goes to a's
  // next position, and b, the newest, gives its blocks back to make room for its own.
  SharedBlockManager m(5, 2, 0);
  Scheduler s(m, {.max_batch_tokens = 16, .max_running = 8});
  const int a = s.submit(iota_tokens(4), 4);
  const int b = s.submit(iota_tokens(4, 10), 4);
  StepPlan p = s.schedule();
  run(m, p);
  s.append(a, 30);
  s.append(b, 31);
  p = s.schedule();
  EXPECT_EQ(s.preemptions(b), 1) << "b came last, so b makes room";
  EXPECT_EQ(s.preemptions(a), 0);
  EXPECT_EQ(s.state(b), RequestState::Waiting);
  EXPECT_EQ(p.logit_requests, std::vector<int>{a});
  run(m, p);
  s.finish(a);
  // b again: its prompt's full blocks are still indexed, so only its last token is computed.
  p = s.schedule();
  EXPECT_EQ(s.state(b), RequestState::Running);
  ASSERT_EQ(p.batch.size(), 1);
  EXPECT_EQ(p.batch.rows[0].token, 31);
  EXPECT_EQ(p.batch.rows[0].pos, 4);
  EXPECT_EQ(s.counters().positions_reused, 4);
  run(m, p);
  s.finish(b);
  EXPECT_TRUE(s.idle());
  m.check_invariants();
  EXPECT_EQ(m.pool().num_used(), static_cast<int>(m.index().size()));
}

TEST(Ch05BatchedScheduler, APromptChunkShrinksToTheSlotsThereAreBeforeAnyoneIsPreempted) {
  // 5 blocks of 2, 5 rows per step. a (2 prompt tokens) decodes; b (8) is admitted with a chunk
  // of 4. Next step b's chunk of 4 would need 2 blocks and 1 is left: it shrinks to 2 rows
  // instead of preempting b (the newest) and throwing its work away.
  SharedBlockManager m(5, 2, 0);
  Scheduler s(m, {.max_batch_tokens = 5, .max_running = 4});
  const int a = s.submit(iota_tokens(2), 8);
  StepPlan p = s.schedule();
  run(m, p);
  s.append(a, 9);
  const int b = s.submit(iota_tokens(8, 20), 2);
  p = s.schedule();
  ASSERT_EQ(p.prefill_rows, 4);
  run(m, p);
  s.append(a, 9);
  p = s.schedule();
  EXPECT_EQ(s.counters().preemptions, 0);
  EXPECT_EQ(s.state(b), RequestState::Running);
  EXPECT_EQ(p.decode_rows, 1);
  EXPECT_EQ(p.prefill_rows, 2);
  run(m, p);
  m.check_invariants();
}

// After b waited for a's block: a gets its next token `a_token`, and b must now be admitted with
// its first `reused` positions taken from the index, computing its last two prompt positions
// beside a's decode row.
void expect_admitted_reusing(Scheduler& s, SharedBlockManager& m, int a, int a_token, int b,
                             long reused) {
  s.append(a, a_token);
  const StepPlan p = s.schedule();
  EXPECT_EQ(s.state(b), RequestState::Running);
  EXPECT_EQ(s.counters().positions_reused, reused) << "b took a's blocks from the index";
  ASSERT_EQ(p.batch.size(), 3);
  EXPECT_EQ(p.batch.rows[1].pos, reused);
  run(m, p);
  m.check_invariants();
}

TEST(Ch05BatchedScheduler, ARequestWaitsForAPrefixBlockBeingComputedInsteadOfComputingItTwice) {
  // Blocks of 2, 4 rows per step. a's 6-token prompt takes two steps; b (a's prompt and two more
  // tokens) arrives in the second, while a computes the block b would need next.
  SharedBlockManager m(32, 2, 0);
  Scheduler s(m, {.max_batch_tokens = 4, .max_running = 4});
  const std::vector<int> pa = iota_tokens(6);
  std::vector<int> pb = pa;
  pb.insert(pb.end(), {40, 41});
  const int a = s.submit(pa, 4);
  StepPlan p = s.schedule();  // a: positions 0-3, its first two blocks
  run(m, p);
  const int b = s.submit(pb, 4);
  p = s.schedule();  // a: positions 4-5; b would take 2 blocks from the index and compute 4-5
  EXPECT_EQ(s.state(b), RequestState::Waiting) << "b waits for a's third block";
  EXPECT_EQ(p.batch.size(), 2);
  run(m, p);
  expect_admitted_reusing(s, m, a, 9, b, 6);  // all three of a's blocks
}

TEST(Ch05BatchedScheduler, ARequestAlsoWaitsForABlockThatADecodingRequestIsFilling) {
  // Blocks of 2. a's prompt is 3 tokens and it generates 50: its second block, [3, 50], is
  // computed by its first decode row. b's prompt is a's tokens and two more, so b needs that block.
  SharedBlockManager m(32, 2, 0);
  Scheduler s(m, {.max_batch_tokens = 4, .max_running = 4});
  const int a = s.submit(std::vector<int>{1, 2, 3}, 4);
  StepPlan p = s.schedule();  // a: positions 0-2
  run(m, p);
  s.append(a, 50);
  const int b = s.submit(std::vector<int>{1, 2, 3, 50, 60, 61}, 4);
  p = s.schedule();  // a's decode row feeds 50 at position 3 and fills the block
  EXPECT_EQ(s.state(b), RequestState::Waiting) << "b waits for a's decode row to fill the block";
  EXPECT_EQ(p.batch.size(), 1);
  run(m, p);
  expect_admitted_reusing(s, m, a, 51, b, 4);  // both of a's blocks
}

TEST(Ch05BatchedScheduler, MisuseIsAnErrorNamingTheRequest) {
  SharedBlockManager m(4, 2, 0);
  Scheduler s(m, {.max_batch_tokens = 4, .max_running = 2});
  EXPECT_THROW(s.submit(std::vector<int>{}, 4), InputError);
  EXPECT_THROW(s.submit(iota_tokens(6), 4), InputError) << "6 + 3 positions > 4 blocks of 2";
  EXPECT_THROW(Scheduler(m, {.max_batch_tokens = 0, .max_running = 2}), UsageError);
  const int a = s.submit(iota_tokens(2), 2);
  StepPlan p = s.schedule();
  EXPECT_THROW(s.schedule(), std::logic_error) << "the batch was not run";
  run(m, p);
  EXPECT_THROW(s.schedule(), std::logic_error) << "no token was appended";
  s.append(a, 5);
  EXPECT_THROW(s.append(a, 6), std::logic_error) << "two tokens for one logit row";
  p = s.schedule();
  run(m, p);
  EXPECT_THROW(s.append(a, 6), std::logic_error) << "past max_new_tokens";
  s.finish(a);
  EXPECT_THROW(s.finish(a), std::logic_error);
  EXPECT_THROW(s.finish(7), InputError);
}

TEST(Ch05BatchedScheduler, RandomWorkloadsFitEveryBatchAndReturnEveryBlock) {
  long preemptions = 0, recomputed = 0, reused = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::mt19937 rng(500 + trial);
    const int bs = 1 + static_cast<int>(rng() % 5);
    const int num_blocks = 8 + static_cast<int>(rng() % 40);
    SharedBlockManager m(num_blocks, bs, trial);
    const int budget = 1 + static_cast<int>(rng() % 24);
    const int max_running = 1 + static_cast<int>(rng() % 6);
    Scheduler s(m, {.max_batch_tokens = budget, .max_running = max_running});
    std::vector<int> storage(static_cast<std::size_t>(num_blocks) * bs, -1);  // slot -> token

    // Prompts that begin alike (two bases), of random lengths; each request must fit alone.
    std::vector<std::vector<int>> bases(2, std::vector<int>(40));
    for (auto& base : bases)
      for (int& t : base) t = static_cast<int>(rng() % 4);
    struct Want {
      std::vector<int> prompt;
      int max_new = 0;
      std::vector<int> sampled;
    };
    std::vector<Want> reqs;
    const int n = 3 + static_cast<int>(rng() % 10);
    for (int i = 0; i < n; ++i) {
      const int max_new = 1 + static_cast<int>(rng() % std::min(12, num_blocks * bs - 1));
      const long room = static_cast<long>(num_blocks) * bs - (max_new - 1);
      const int len = 1 + static_cast<int>(rng() % std::min<long>(room, 30));
      const std::vector<int>& base = bases[rng() % 2];
      std::vector<int> prompt(base.begin(), base.begin() + len);
      prompt.back() = 100 + i;  // requests differ somewhere
      reqs.push_back({prompt, max_new, {}});
    }

    int submitted = 0;
    for (int step = 0; submitted < n || !s.idle(); ++step) {
      ASSERT_LT(step, 5000) << "trial " << trial << ": no progress";
      while (submitted < n && rng() % 3 == 0) {
        ASSERT_EQ(s.submit(reqs[submitted].prompt, reqs[submitted].max_new), submitted);
        ++submitted;
      }
      const StepPlan plan = s.schedule();
      ASSERT_LE(plan.batch.size(), budget);
      ASSERT_LE(s.num_running(), max_running);
      // The batch runs: every row's slot gets its token (the copies first, as a cache makes them).
      ch04::SharedView sb;
      ASSERT_NO_THROW(sb = ch04::shared_view(m, plan.batch))
          << "trial " << trial << ", step " << step << ": the plan does not fit the pool";
      for (const ch04::BlockCopy& c : sb.copies)
        for (int i = 0; i < c.slots; ++i) storage[c.dst * bs + i] = storage[c.src * bs + i];
      for (std::size_t i = 0; i < plan.batch.rows.size(); ++i)
        storage[sb.view.slot_mapping[i]] = plan.batch.rows[i].token;
      ASSERT_NO_THROW(m.check_invariants()) << "trial " << trial << ", step " << step;
      std::size_t j = 0;
      for (const auto& row : plan.batch.rows) {
        if (!row.wants_logits) continue;
        ASSERT_LT(j, plan.logit_requests.size());
        const int id = plan.logit_requests[j++];
        // Every position of the request reads back its own token.
        const std::vector<int>& toks = s.tokens(id);
        ASSERT_EQ(row.pos + 1, static_cast<int>(toks.size())) << "logits only on the last row";
        for (int p = 0; p <= row.pos; ++p)
          ASSERT_EQ(storage[m.slot_of(row.seq, p)], toks[p])
              << "trial " << trial << ", request " << id << ", position " << p;
        Want& w = reqs[id];
        const int token = static_cast<int>(rng() % 4);
        w.sampled.push_back(token);
        if (static_cast<int>(w.sampled.size()) == w.max_new || rng() % 16 == 0) {
          s.finish(id);
        } else {
          s.append(id, token);
        }
      }
      ASSERT_EQ(j, plan.logit_requests.size());
    }
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(s.state(i), RequestState::Finished);
      std::vector<int> want = reqs[i].prompt;
      want.insert(want.end(), reqs[i].sampled.begin(), reqs[i].sampled.end() - 1);
      EXPECT_EQ(s.tokens(i), want) << "trial " << trial << ", request " << i;
    }
    m.check_invariants();
    EXPECT_EQ(m.pool().num_used(), static_cast<int>(m.index().size()))
        << "trial " << trial << ": blocks leaked";
    preemptions += s.counters().preemptions;
    recomputed += s.counters().recomputed_rows;
    reused += s.counters().positions_reused;
  }
  EXPECT_GT(preemptions, 0) << "no trial preempted";
  EXPECT_GT(recomputed, 0) << "no preempted request recomputed a position";
  EXPECT_GT(reused, 0) << "no prefix was reused";
}

}  // namespace
}  // namespace kvheap
