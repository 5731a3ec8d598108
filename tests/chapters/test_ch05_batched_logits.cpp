// Chapter 5's claim about the model's output: a request served in a continuous batch (its prompt
// cut into chunks, its rows beside other requests' rows, preempted and recomputed, its prefix
// taken from the index) computes the logits it computes alone, within 1e-5 relative at every
// step. "Alone" is chapter 4's cache holding only that request, its prompt prefilled in one pass,
// fed the tokens the batched run chose (chapter 4 is itself checked against chapters 3 and 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "chapters/05_batched_scheduler/scheduler.hpp"
#include "common/forward/backend.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/model/synthetic_weights.hpp"
#include "tests/support/test_support.hpp"

#if KVHEAP_HAS_CUDA
#include "tests/support/device_test_support.hpp"
#endif

namespace kvheap {
namespace {

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
