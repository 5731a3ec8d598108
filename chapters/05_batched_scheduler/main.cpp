/*! \file
    \brief ch05_batched_scheduler: continuous batching over chapter 4's shared blocks.

    What is new in this chapter:
      1. the Scheduler: every step, a decode row for each running request, then chunks of the
         prompts being prefilled, then new requests, admitted when the blocks of their first chunk
         are free rather than their worst case, all under --max-batch-tokens;
      2. preemption by recomputation: when the pool runs out mid-decode, the newest request gives
         its blocks back and is recomputed later, mostly from its own blocks in the prefix index;
      3. one forward pass per step for every row in it: the weights are read once for the batch.

    Sample command:
      build/cpu/bin/ch05_batched_scheduler --model stories15m --num-seqs 16 --max-batch-tokens 32
*/
#include <fmt/format.h>

#include <memory>

#include "base/error.hpp"
#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "chapters/05_batched_scheduler/continuous_batching.hpp"
#include "common/program/chapter.hpp"
#include "common/program/kv_budget.hpp"

using namespace kvheap;

int main(int argc, char** argv) {
  PoolOptions pool;
  ch05::SchedulerConfig limits{.max_batch_tokens = 64, .max_running = 64};
  int arrival_interval = 0;
  ch04::ReadOnceFlags read_once;

  Chapter chapter;
  chapter.name = "05_batched_scheduler";
  chapter.title = "kvheap chapter 5: continuous batching, chunked prefill and preemption";
  chapter.add_flags = [&](CommandLine& cli) {
    add_pool_options(cli, pool);
    cli.option("--max-batch-tokens", limits.max_batch_tokens,
               "Rows per forward pass: decode rows plus prefill chunks")
        .show_default();
    cli.option("--max-running", limits.max_running, "Requests holding a sequence at once")
        .show_default();
    cli.option("--arrival-interval", arrival_interval,
               "Steps between two requests' arrivals; 0 submits them all at the start")
        .show_default()
        .excludes(cli.get("--workload"));
    read_once.add(cli);
  };
  chapter.check_flags = [&](const CommonOptions&) {
    (void)read_once.resolve();
    if (arrival_interval < 0)
      throw UsageError(
          fmt::format("--arrival-interval must be 0 or more, got {}", arrival_interval));
  };
  // A pool of 9 blocks of 4 for four requests of up to 22 positions (6 blocks): they preempt.
  chapter.configure_self_check = [&](CommonOptions& o) {
    pool.block_size = 4;
    limits.max_batch_tokens = 5;
    o.kv_budget_mb = 9 * 4 * 512 / 1e6;  // tiny: 512 bytes of K and V per position
  };
  chapter.shape_requests = [&](std::vector<Request>& requests) {
    if (arrival_interval == 0) return;  // as given: at the start, or --workload's arrivals
    for (std::size_t i = 0; i < requests.size(); ++i)
      requests[i].arrival_step = static_cast<long>(i) * arrival_interval;
  };
  chapter.make_policy = [&](const Run& run) {
    PoolSize size;  // the default budget: what chapter 2 reserves (max_seq_len each)
    auto cache = ch04::make_shared_cache(run, pool, read_once.resolve(), size);
    return std::make_unique<ch05::ContinuousBatching>(std::move(cache), run.config, run.kv, size,
                                                      limits);
  };
  return run_chapter(chapter, argc, argv);
}
