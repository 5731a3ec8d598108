// Chapter 5's claims about its scheduler, without a model: a request is admitted when its next
// chunk fits, not its worst case; decode rows go first and no batch exceeds the token budget; when
// the pool runs dry the newest request is preempted and later recomputed from the blocks the
// prefix index kept; and through random arrivals, lengths and pool sizes every batch fits, every
// request finishes with its own tokens in its slots, and every block comes back.
//
// And its claim about the model's output: a request served in a continuous batch (its prompt cut
// into chunks, its rows beside other requests' rows, preempted and recomputed, its prefix taken
// from the index) computes the logits it computes alone, within 1e-5 relative at every step.
// "Alone" is chapter 4's cache holding only that request, its prompt prefilled in one pass, fed
// the tokens the batched run chose (chapter 4 is itself checked against chapters 3 and 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include "base/error.hpp"
#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "chapters/05_batched_scheduler/scheduler.hpp"
#include "common/forward/backend.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/model/synthetic_weights.hpp"
#include "tests/support/device_test_support.hpp"
#include "tests/support/test_support.hpp"

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

using ch05::SchedulerConfig;

/// Chapter 4's cache and a forward pass over it on `device`, as the chapter programs build them.
struct SharedRun {
  std::unique_ptr<Backend> backend;
  ch04::SharedCache cache;
  SharedRun(const ModelWeights& w, const std::string& device, int num_blocks, int block_size,
            std::uint64_t shuffle_seed)
      : backend(make_backend(w, {.device = device, .measure_peak = false})),
        cache(w.config, DType::F32, num_blocks, block_size, shuffle_seed, /*read_once=*/true,
              backend->memory()) {}
  ch04::SharedBlockManager& blocks() { return cache.blocks(); }
  std::span<const float> forward(const Batch& b) { return backend->forward_logits(b, cache); }
};

/// What a batched run produced for each request: the logits of each of its logit rows.
struct Served {
  std::vector<std::vector<std::vector<float>>> logits;  // [request][step][vocab]
  SchedulerCounters counters;
};

/// Serves `prompts` through the scheduler on `backend`, greedy, `max_new` tokens each; request i
/// arrives before step i x `arrive_every`.
Served serve(SharedRun& backend, const std::vector<std::vector<int>>& prompts, int max_new,
             SchedulerConfig cfg, int arrive_every, int vocab) {
  ch05::Scheduler s(backend.blocks(), cfg);
  Served out;
  out.logits.resize(prompts.size());
  std::size_t next = 0;
  for (int step = 0; next < prompts.size() || !s.idle(); ++step) {
    for (; next < prompts.size() && static_cast<int>(next) * arrive_every <= step; ++next)
      s.submit(prompts[next], max_new);
    const StepPlan plan = s.schedule();
    if (plan.batch.rows.empty()) continue;
    const std::span<const float> logits = backend.forward(plan.batch);
    for (std::size_t j = 0; j < plan.logit_requests.size(); ++j) {
      const int id = plan.logit_requests[j];
      const std::span<const float> row = logits.subspan(j * vocab, vocab);
      out.logits[id].emplace_back(row.begin(), row.end());
      const int token = static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
      if (static_cast<int>(out.logits[id].size()) == max_new) {
        s.finish(id);
      } else {
        s.append(id, token);
      }
    }
  }
  backend.blocks().check_invariants();
  EXPECT_EQ(backend.blocks().pool().num_used(), static_cast<int>(backend.blocks().index().size()))
      << "blocks leaked";
  out.counters = s.counters();
  return out;
}

/// Each request alone on `alone` (nothing reused from the index), fed the batched run's greedy
/// tokens; returns the largest relative difference of any logits row.
double worst_against_alone(SharedRun& alone, const std::vector<std::vector<int>>& prompts,
                           const Served& served) {
  double worst = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto& steps = served.logits[i];
    const int seq = alone.blocks().allocate();
    Batch b;
    for (int p = 0; p < static_cast<int>(prompts[i].size()); ++p)
      b.rows.push_back({prompts[i][p], seq, p, p + 1 == static_cast<int>(prompts[i].size())});
    for (std::size_t t = 0; t < steps.size(); ++t) {
      const std::span<const float> got = alone.forward(b);
      worst = std::max(worst, test::rel_inf_error(steps[t], got));
      const int token =
          static_cast<int>(std::max_element(steps[t].begin(), steps[t].end()) - steps[t].begin());
      b.rows = {{token, seq, b.rows.back().pos + 1, true}};
    }
    alone.blocks().free(seq);
  }
  return worst;
}

/// Prompts that begin alike (a shared preamble of 9 tokens), of different lengths.
std::vector<std::vector<int>> prompts_sharing_a_preamble(std::vector<int> preamble) {
  std::vector<std::vector<int>> out;
  const std::vector<std::vector<int>> tails = {{5},      {7, 8, 9, 10},         {5},
                                               {11, 12}, {3, 4, 5, 6, 7, 8, 9}, {21}};
  for (const auto& tail : tails) {
    std::vector<int> p = preamble;
    p.insert(p.end(), tail.begin(), tail.end());
    out.push_back(p);
  }
  return out;
}

struct ServeSetup {
  int block_size;
  int num_blocks;
  SchedulerConfig cfg;
  int arrive_every;
};

/// Runs every setup on `device` and checks the logits; returns the preemptions seen.
long check_device(const ModelWeights& w, const std::string& device,
                  const std::vector<std::vector<int>>& prompts, int max_new,
                  const std::vector<ServeSetup>& setups) {
  long preemptions = 0;
  for (const ServeSetup& st : setups) {
    SharedRun batched(w, device, st.num_blocks, st.block_size, 7);
    SharedRun alone(w, device, 256, st.block_size, 0);
    const Served served =
        serve(batched, prompts, max_new, st.cfg, st.arrive_every, w.config.vocab_size);
    EXPECT_LE(worst_against_alone(alone, prompts, served), 1e-5)
        << device << ", block size " << st.block_size << ", " << st.num_blocks << " blocks, "
        << st.cfg.max_batch_tokens << " rows per step";
    EXPECT_GT(served.counters.positions_reused, 0) << "no prefix was taken from the index";
    preemptions += served.counters.preemptions;
  }
  return preemptions;
}

// A tight pool (preemption), a small budget (chunked prompts), and staggered arrivals.
const std::vector<ServeSetup> kSetups = {
    {4, 12, {.max_batch_tokens = 6, .max_running = 8}, 0},
    {3, 40, {.max_batch_tokens = 5, .max_running = 3}, 2},
    {8, 64, {.max_batch_tokens = 64, .max_running = 8}, 1},
};

TEST(Ch05BatchedScheduler, BatchedLogitsMatchEachRequestAloneTiny) {
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 5);
  const auto prompts = prompts_sharing_a_preamble({1, 40, 41, 42, 43, 44, 45, 46, 47});
  EXPECT_GT(check_device(w, "cpu", prompts, 12, kSetups), 0) << "no setup preempted";
}

TEST(Ch05BatchedScheduler, BatchedLogitsMatchEachRequestAloneStories260K) {
  KVHEAP_REQUIRE_MODEL(path, "stories260K.bin");
  const ModelWeights w = load_llama2c(path);
  const auto prompts = prompts_sharing_a_preamble({1, 403, 407, 261, 378, 271, 420, 306, 422});
  EXPECT_GT(check_device(w, "cpu", prompts, 12, kSetups), 0) << "no setup preempted";
}

#if KVHEAP_HAS_CUDA
TEST(Ch05BatchedScheduler, BatchedLogitsMatchEachRequestAloneOnTheDevice) {
  KVHEAP_REQUIRE_DEVICE();
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 5);
  const auto prompts = prompts_sharing_a_preamble({1, 40, 41, 42, 43, 44, 45, 46, 47});
  // One setup: every forward pass is slow in the simulator. It has all three: a tight pool,
  // chunked prompts and staggered arrivals.
  const ServeSetup tight_and_staggered = {4, 12, {.max_batch_tokens = 6, .max_running = 4}, 1};
  EXPECT_GT(check_device(w, "cuda", prompts, 12, {tight_and_staggered}), 0) << "no preemption";
}
#endif

}  // namespace
}  // namespace kvheap
