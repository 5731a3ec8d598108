// The serving loop's host budget on a GPU, held by the simulator's call counters: a steady pass of
// decode rows costs one upload (the batch, the sampling jobs and the page tables together), 16
// bytes down per token chosen, one wait, and no allocation or free, whatever the vocabulary. The
// simulator runs every copy at once, so it cannot time the host's overhead; it can count it.
#include <gtest/gtest.h>

#include <iostream>
#include <vector>

#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "chapters/05_batched_scheduler/continuous_batching.hpp"
#include "common/forward/backend.hpp"
#include "common/serving/serve.hpp"
#include "common/model/synthetic_weights.hpp"
#include "kernels/sample.hpp"

#if defined(KVHEAP_SIM)
#include "device/sim/counters.hpp"
#include "tests/support/device_test_support.hpp"
#endif

namespace kvheap {
namespace {

#if defined(KVHEAP_SIM)

constexpr int kRequests = 24;

/// What one step of a run cost, with the rows of its pass.
struct StepCost {
  int rows = 0;
  int running = 0;
  sim::ApiCounters calls;
};

/// Serves 24 requests (short prompts, half of them sampling with temperature and top-p) through
/// chapter 5's policy on the simulated device, counting each step's runtime calls.
std::vector<StepCost> serve_counted(const ServeHooks& extra = {}) {
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 3);
  const ModelConfig& c = w.config;
  const auto backend = make_backend(w, {.device = "cuda", .measure_peak = false});
  const int num_blocks = 64, block_size = 16;
  auto cache = std::make_unique<ch04::SharedCache>(c, DType::F32, num_blocks, block_size, 1,
                                                   /*read_once=*/true, backend->memory());
  const PoolSize pool{
      static_cast<std::size_t>(num_blocks) * block_size * kv_bytes_per_token(c, DType::F32),
      num_blocks};
  ch05::ContinuousBatching policy(std::move(cache), c, DType::F32, pool, {64, 64});
  std::vector<Request> requests(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    requests[i].prompt = {1, 3 + i, 5 + i % 7};
    requests[i].max_new_tokens = 12;
    requests[i].ignore_eos = true;
    requests[i].sampling = {.temperature = i % 2 == 0 ? 0.0f : 0.8f,
                            .top_p = 0.9f,
                            .seed = static_cast<std::uint64_t>(i)};
  }
  std::vector<sim::ApiCounters> after;  // the counts after each step
  ServeHooks hooks = extra;
  hooks.after_step = [&](long) { after.push_back(sim::api_counters()); };
  const sim::ApiCounters start = sim::api_counters();
  const ServeResult res = serve(policy, *backend, requests, c, hooks);
  std::vector<StepCost> steps;
  for (std::size_t i = 0; i < res.timeline.size(); ++i)
    steps.push_back({res.timeline[i].rows, res.timeline[i].running,
                     after[i].since(i == 0 ? start : after[i - 1])});
  return steps;
}

/// The third step whose pass held one decode row for each of the 24 requests: by then every
/// buffer has grown to its steady size.
StepCost steady_decode_step(const std::vector<StepCost>& steps) {
  int seen = 0;
  for (const StepCost& s : steps)
    if (s.rows == kRequests && s.running == kRequests && ++seen == 3) return s;
  ADD_FAILURE() << "no third pass of " << kRequests << " decode rows";
  return {};
}

TEST(Ch05PassBudget, SteadyDecodePassMakesOneUploadAndBringsSixteenBytesARow) {
  KVHEAP_REQUIRE_DEVICE();
  const StepCost s = steady_decode_step(serve_counted());
  EXPECT_LE(s.calls.uploads, 1) << "uploads in one pass";
  EXPECT_LE(s.calls.bytes_down, static_cast<long>(sizeof(SampledToken)) * kRequests)
      << "bytes brought to the host for " << kRequests << " logit rows";
  EXPECT_LE(s.calls.downloads, 1);
  EXPECT_LE(s.calls.syncs, 1) << "waits on the device in one pass";
  EXPECT_EQ(s.calls.frees, 0) << "a steady pass frees nothing";
  EXPECT_EQ(s.calls.allocations, 0) << "a steady pass allocates nothing";
  EXPECT_GT(s.calls.launches, 0);
  std::cout << "[ counts   ] a pass of " << kRequests << " decode rows: " << s.calls.uploads
            << " upload (" << s.calls.bytes_up << " B), " << s.calls.downloads << " download ("
            << s.calls.bytes_down << " B), " << s.calls.syncs << " sync, " << s.calls.frees
            << " frees, " << s.calls.launches << " launches and GEMMs\n";
}

// The counters see a full-logits download: a hook that asks for the logits costs every pass
// [rows, vocab] floats, which the budget above would refuse.
TEST(Ch05PassBudget, AskingForTheLogitsShowsInTheCounts) {
  KVHEAP_REQUIRE_DEVICE();
  ServeHooks hooks;
  hooks.on_logits = [](const StepPlan&, std::span<const float>) {};
  const StepCost s = steady_decode_step(serve_counted(hooks));
  const long vocab = preset("tiny").vocab_size;
  EXPECT_GE(s.calls.bytes_down, static_cast<long>(sizeof(float)) * kRequests * vocab);
}

#else

TEST(Ch05PassBudget, SteadyDecodePassMakesOneUploadAndBringsSixteenBytesARow) {
  GTEST_SKIP() << "the call counters are the simulator's (KVHEAP_CUDA=sim)";
}

#endif

}  // namespace
}  // namespace kvheap
