/*! \file
    \brief ch04_cow_prefix_sharing: prompts that begin alike and samples of one prompt, over
    reference-counted blocks.

    What is new in this chapter:
      1. SharedBlockManager: fork shares every block of a sequence, copy-on-write copies the one
         block a sequence still writes, and a prefix index finds the full blocks a prompt begins
         with, so a shared prefix is computed once and stored once;
      2. shared-prefix attention: rows that share a prefix read it once per step for all of them
         (kernels/shared_prefix_attention.*);
      3. admission that counts what a request will share; prompts prefilled one per pass, so each
         finds the blocks of those before it, then forked into --samples sequences.

    Sample command:
      build/cpu/bin/ch04_cow_prefix_sharing --model stories15m --samples 8 --max-new-tokens 64
*/
#include <memory>

#include "chapters/04_cow_prefix_sharing/admission.hpp"
#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "common/program/chapter.hpp"
#include "common/program/kv_budget.hpp"
#include "common/serving/static_batches.hpp"

using namespace kvheap;

int main(int argc, char** argv) {
  PoolOptions pool;
  int samples = 4;
  ch04::ReadOnceFlags read_once;

  Chapter chapter;
  chapter.name = "04_cow_prefix_sharing";
  chapter.title = "kvheap chapter 4: reference-counted blocks, fork, copy-on-write, prefix index";
  chapter.num_seqs_help = "Prompts to serve (copies of the prompt)";
  chapter.add_flags = [&](CommandLine& cli) {
    add_pool_options(cli, pool);
    cli.option("--samples", samples, "Sequences forked from each prompt").show_default();
    read_once.add(cli);
  };
  chapter.check_flags = [&](const CommonOptions&) { (void)read_once.resolve(); };
  chapter.configure_self_check = [&](CommonOptions&) {
    pool.block_size = 4;
    samples = 2;
  };
  chapter.shape_requests = [&](std::vector<Request>& requests) {
    requests = ch04::with_samples(requests, samples);
  };
  chapter.make_policy = [&](const Run& run) {
    PoolSize size;  // the default budget: what chapter 2 reserves (max_seq_len each)
    auto cache = ch04::make_shared_cache(run, pool, read_once.resolve(), size);
    // One prompt per pass: each finds the full blocks of the prompts before it in the index.
    return std::make_unique<StaticBatches>(
        std::make_unique<ch04::SharingAdmission>(std::move(cache), run.config, run.kv, size),
        StaticBatches::Options{.one_prompt_per_pass = true});
  };
  return run_chapter(chapter, argc, argv);
}
