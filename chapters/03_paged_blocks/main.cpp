/*! \file
    \brief ch03_paged_blocks: many sequences decoded together over a block pool with page tables.

    What is new in this chapter:
      1. BlockPool and BlockManager: fixed-size blocks from a shuffled free list, a page table per
         sequence, a block taken only when a sequence's last one is full;
      2. PagedCache: the page tables, in CSR form, are all the attention kernels see of it
         (kernels/paged_attention.hpp); results are bitwise equal to chapter 2's;
      3. admission by worst case in blocks, and the pool reported like malloc statistics, with how
         many sequences each policy fits in the same budget (--pool-map draws it).

    Sample command:
      build/cpu/bin/ch03_paged_blocks --model stories15m --num-seqs 8 --pool-map pool.svg
*/
#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>

#include "base/error.hpp"
#include "chapters/03_paged_blocks/admission.hpp"
#include "chapters/03_paged_blocks/paged_cache.hpp"
#include "chapters/03_paged_blocks/pool_map.hpp"
#include "common/program/chapter.hpp"
#include "common/program/kv_budget.hpp"
#include "common/serving/static_batches.hpp"

using namespace kvheap;

int main(int argc, char** argv) {
  PoolOptions pool;
  std::string pool_map;
  int pool_map_every = 0;
  ch03::WorstCaseAdmission* admission_of_run = nullptr;  // for the pool maps drawn between steps

  Chapter chapter;
  chapter.name = "03_paged_blocks";
  chapter.title = "kvheap chapter 3: paged blocks, page tables and paged attention";
  chapter.default_num_seqs = 4;
  chapter.num_seqs_help = "Sequences to serve (copies of the prompt)";
  chapter.add_flags = [&](CommandLine& cli) {
    add_pool_options(cli, pool);
    const Flag map =
        cli.option("--pool-map", pool_map, "Write an SVG map of the block pool to this file")
            .not_empty("a file name for the SVG map");
    cli.option("--pool-map-every", pool_map_every, "Also write FILE.stepN.svg every N steps")
        .needs(map);
  };
  chapter.check_flags = [&](const CommonOptions&) {
    if (pool_map_every < 0) throw UsageError("--pool-map-every must be >= 0");
  };
  chapter.configure_self_check = [&](CommonOptions&) { pool.block_size = 4; };
  chapter.make_policy = [&](const Run& run) {
    // Default budget: what chapter 2 reserves for these sequences (max_seq_len each).
    const PoolSize size = pool_for_run(run, pool.block_size);
    auto cache =
        std::make_unique<ch03::PagedCache>(run.config, run.kv, size.num_blocks, pool.block_size,
                                           pool.shuffle_seed, run.backend.memory());
    auto admission = std::make_unique<ch03::WorstCaseAdmission>(std::move(cache), run.config,
                                                                run.kv, size, pool_map);
    admission_of_run = admission.get();
    return std::make_unique<StaticBatches>(std::move(admission));
  };
  chapter.after_step = [&](long step) {
    if (!pool_map.empty() && pool_map_every > 0 && step % pool_map_every == 0)
      ch03::write_pool_map(admission_of_run->blocks(), fmt::format("{}.step{}.svg", pool_map, step),
                           fmt::format("step {}", step));
  };
  return run_chapter(chapter, argc, argv);
}
