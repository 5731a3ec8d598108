// ch05_batched_scheduler: continuous batching over chapter 4's shared blocks.
//
// Requests arrive (all at once, or one every --arrival-interval steps) and queue. Each step the
// scheduler fills one batch under --max-batch-tokens: a decode row for every running request,
// then chunks of prompts being prefilled, then newly admitted requests, admitted when the blocks
// of their first chunk are free rather than their worst case. One forward pass runs the batch,
// reading the weights once for every row in it; each logit row samples its request's next token.
// When the pool runs out mid-decode, the newest request is preempted and later recomputed, mostly
// from its own blocks, which the prefix index kept.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "chapters/03_paged_blocks/paged_host_cache.hpp"
#include "chapters/04_cow_prefix_sharing/shared_backend.hpp"
#include "chapters/05_batched_scheduler/scheduler.hpp"
#include "common/cli.hpp"
#include "common/generate.hpp"
#include "common/model_loader.hpp"
#include "common/pool.hpp"
#include "common/prompts.hpp"
#include "common/report.hpp"
#include "common/serve_options.hpp"
#include "common/tokenizer.hpp"

using namespace kvheap;
using namespace kvheap::ch05;

namespace {

struct Options : ServeOptions {
  int max_batch_tokens = 64;
  int max_running = 64;
  int arrival_interval = 0;
  bool no_read_once = false;
};

/// What the program keeps per request beside the scheduler: its sampler and its output.
struct Served {
  std::unique_ptr<Sampler> sampler;
  std::vector<int> generated;  // every sampled token kept, the last one included
  std::string status = "waiting";
  long arrival_step = 0;
  long finish_step = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CommandLine cli{"kvheap chapter 5: continuous batching, chunked prefill and preemption",
                  "ch05_batched_scheduler"};
  CommonOptions o;
  o.device = "cpu";
  add_common_options(cli, o);
  Options p;
  add_serve_options(cli, p, "Requests to serve (copies of the prompt)");
  cli.option("--max-batch-tokens", p.max_batch_tokens,
             "Rows per forward pass: decode rows plus prefill chunks")
      .show_default();
  cli.option("--max-running", p.max_running, "Requests holding a sequence at once").show_default();
  cli.option("--arrival-interval", p.arrival_interval,
             "Steps between two requests' arrivals; 0 submits them all at the start")
      .show_default();
  cli.flag("--no-read-once", p.no_read_once,
           "Every row reads its whole context, shared prefixes included");

  return run_cli(cli, argc, argv, [&] {
    check_serve_options(o, p);
    if (p.arrival_interval < 0)
      throw UsageError(
          fmt::format("--arrival-interval must be 0 or more, got {}", p.arrival_interval));
    const SchedulerConfig sched_cfg{p.max_batch_tokens, p.max_running};
    const std::size_t budget_cap = kv_budget_bytes(o);
    const DType kv = parse_dtype(o.kv_dtype);
    const DType wt = parse_dtype(p.weight_dtype);
    const int threads = apply_threads(o);
    const ModelWeights weights = load_model(o.model, o.model_seed);
    const ModelConfig& c = weights.config;
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(o, c);
    const std::vector<std::vector<int>> prompts =
        load_prompts(o, p.num_seqs, p.prompts_file, c, tok.get());
    long longest = 0;
    for (const auto& pr : prompts) {
      check_generation_fits(pr.size(), o.max_new_tokens, c);
      longest = std::max(longest, positions_stored(pr.size(), o.max_new_tokens));
    }
    // Default budget: what chapter 2 reserves for these requests (max_seq_len each), as in
    // chapters 3 and 4; --kv-budget-mb smaller than that is where admission and preemption show.
    const PoolSize pool =
        pool_for_run(c, kv, budget_cap, prompts.size(), p.block_size, longest);
    ch04::SharedBackend backend(weights, {.device = o.device,
                                          .kv = kv,
                                          .weights = wt,
                                          .num_blocks = pool.num_blocks,
                                          .block_size = p.block_size,
                                          .shuffle_seed = p.shuffle_seed,
                                          .read_once = !p.no_read_once,
                                          .measure_peak = !p.no_peak,
                                          .threads = threads});
    ch04::SharedBlockManager& blocks = backend.blocks();
    Scheduler sched(blocks, sched_cfg);

    const GenerationConfig gen{o.max_new_tokens, sampler_config(o), o.ignore_eos};
    std::vector<Served> served(prompts.size());
    const std::size_t bpt = kv_bytes_per_token(c, kv);
    const double weight_bytes = static_cast<double>(weight_bytes_per_decode_step(c, wt));
    double kv_bytes_read = 0;
    // KV of the running requests at the pass that held the most (positions, each shared one once;
    // and the blocks they held then), and the most the prefix index kept of finished ones.
    const std::size_t block_bytes = static_cast<std::size_t>(p.block_size) * bpt;
    std::size_t peak_kv_used = 0, kv_reserved_at_peak = 0, peak_cached = 0;
    long step = 0;
    std::size_t next = 0;  // next request to arrive
    const auto t0 = std::chrono::steady_clock::now();
    while (o.max_new_tokens > 0) {
      // Arrivals: request i comes in before step i x interval; an idle server skips ahead to it.
      if (sched.idle() && next < prompts.size())
        step = std::max(step, static_cast<long>(next) * p.arrival_interval);
      for (; next < prompts.size() && static_cast<long>(next) * p.arrival_interval <= step;
           ++next) {
        const int id = sched.submit(prompts[next], o.max_new_tokens);
        SamplerConfig sc = sampler_config(o);
        sc.seed += static_cast<std::uint64_t>(id);
        served[id].sampler = std::make_unique<Sampler>(sc);
        served[id].status = "running";
        served[id].arrival_step = step;
      }
      const StepPlan plan = sched.schedule();
      if (plan.batch.rows.empty()) {
        if (next == prompts.size()) break;
        ++step;
        continue;
      }
      const std::span<const float> logits = backend.forward(plan.batch);
      kv_bytes_read += static_cast<double>(backend.positions_read()) * bpt;
      const std::size_t cached = blocks.index().num_evictable() * block_bytes;
      const std::size_t live = blocks.slots_stored() * bpt - cached;
      if (live > peak_kv_used) {
        peak_kv_used = live;
        kv_reserved_at_peak = static_cast<std::size_t>(blocks.blocks_held()) * block_bytes;
      }
      peak_cached = std::max(peak_cached, cached);
      for (std::size_t j = 0; j < plan.logit_requests.size(); ++j) {
        const int id = plan.logit_requests[j];
        Served& s = served[id];
        const int token = s.sampler->sample(logits.subspan(j * c.vocab_size, c.vocab_size));
        const std::string done = take_token(token, c, gen, s.generated);
        if (done.empty()) {
          sched.append(id, token);
          continue;
        }
        s.status = done;
        s.finish_step = step + 1;
        sched.finish(id);
      }
      ++step;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    long generated_total = 0;
    for (const Served& s : served) generated_total += static_cast<long>(s.generated.size());
    for (Served& s : served)
      if (o.max_new_tokens == 0) s.status = "max_new_tokens";

    // Every block must come back: after the last request finished, only the index holds any.
    blocks.check_invariants();
    if (blocks.pool().num_used() != static_cast<int>(blocks.index().size()))
      throw std::logic_error("blocks leaked after every request finished");

    const SchedulerCounters& k = sched.counters();
    const long rows = k.decode_rows + k.prefill_rows;
    const double steps = static_cast<double>(k.steps);
    // Passes mix prefill and decode rows, so the whole run counts as decoding: tokens/s is every
    // generated token over the whole run's time, and bytes per step average over every pass.
    DecodeReport rep;
    rep.chapter = "05_batched_scheduler";
    rep.model = c.name;
    rep.device = backend.device_name();
    rep.kv_dtype = kv;
    rep.weight_dtype = wt;
    rep.run.decode_steps = static_cast<int>(k.steps);
    rep.run.decode_seconds = seconds;
    rep.kv_reserved_bytes = kv_reserved_at_peak;
    rep.kv_used_bytes = peak_kv_used;
    rep.weight_bytes_per_step = weight_bytes;
    rep.kv_bytes_per_step = steps > 0 ? kv_bytes_read / steps : 0;
    rep.peak = backend.peak();
    const double gbps = rep.decode_gbps();
    const double gen_per_s = seconds > 0 ? generated_total / seconds : 0;
    const double rows_per_s = seconds > 0 ? rows / seconds : 0;
    long prompt_total = 0;
    for (const auto& pr : prompts) prompt_total += static_cast<long>(pr.size());

    if (o.json) {
      nlohmann::json seqs = nlohmann::json::array(), ids = nlohmann::json::array();
      for (std::size_t i = 0; i < served.size(); ++i) {
        const Served& s = served[i];
        nlohmann::json j = {{"prompt_ids", prompts[i]},
                            {"generated_ids", s.generated},
                            {"status", s.status},
                            {"arrival_step", s.arrival_step},
                            {"finish_step", s.finish_step},
                            {"preemptions", i < static_cast<std::size_t>(sched.num_requests())
                                                ? sched.preemptions(static_cast<int>(i))
                                                : 0}};
        if (tok) j["text"] = tok->decode(s.generated);
        seqs.push_back(j);
        ids.push_back(s.generated);
      }
      const nlohmann::json scheduler = {{"steps", k.steps},
                                        {"decode_rows", k.decode_rows},
                                        {"prefill_rows", k.prefill_rows},
                                        {"recomputed_rows", k.recomputed_rows},
                                        {"positions_reused", k.positions_reused},
                                        {"admissions", k.admissions},
                                        {"preemptions", k.preemptions},
                                        {"peak_running", k.peak_running},
                                        {"max_batch_tokens", p.max_batch_tokens},
                                        {"max_running", p.max_running},
                                        {"block_size", p.block_size},
                                        {"blocks_total", pool.num_blocks}};
      nlohmann::json m = metrics_json(rep);
      for (const char* key : {"stop_reason", "prefill_seconds", "prefill_tokens_per_s"})
        m.erase(key);
      m["prompt_tokens"] = prompt_total;
      m["generated_tokens"] = generated_total;
      m["decode_tokens_per_s"] = gen_per_s;
      m["rows_per_s"] = rows_per_s;
      m["kv_budget_bytes"] = pool.budget_bytes;
      m["kv_cached_peak_bytes"] = peak_cached;
      std::cout << json_line({{"chapter", rep.chapter},
                              {"model", c.name},
                              {"generated_ids", ids},
                              {"sequences", seqs},
                              {"scheduler", scheduler},
                              {"metrics", m}})
                << "\n";
      return;
    }
    std::cout << describe(c) << "\n";
    for (std::size_t i = 0; i < served.size(); ++i) {
      const Served& s = served[i];
      fmt::print(
          "request {}: {} prompt tokens, {} generated ({}), steps {} to {}, {} preemptions\n", i,
          prompts[i].size(), s.generated.size(), s.status, s.arrival_step, s.finish_step,
          i < static_cast<std::size_t>(sched.num_requests())
              ? sched.preemptions(static_cast<int>(i))
              : 0);
    }
    fmt::print(
        "kvheap 05_batched_scheduler | model {} | {} | KV {} | block size {} | budget "
        "{:.3f} MB ({} blocks)\n",
        c.name, backend.device_name(), dtype_name(kv), p.block_size, pool.budget_bytes / 1e6,
        pool.num_blocks);
    fmt::print(
        "  steps     : {} forward passes of at most {} rows: {} decode rows, {} prefill rows "
        "({} recomputed after preemption), {:.1f} rows per pass\n",
        k.steps, p.max_batch_tokens, k.decode_rows, k.prefill_rows, k.recomputed_rows,
        steps > 0 ? rows / steps : 0.0);
    fmt::print(
        "  admission : up to {} requests running at once (limit {}); {} admissions, {} "
        "preemptions; {} positions taken from the prefix index\n",
        k.peak_running, p.max_running, k.admissions, k.preemptions, k.positions_reused);
    fmt::print(
        "  memory    : running requests' KV at most {:.3f} MB ({:.3f} MB of blocks held then) of "
        "the {:.3f} MB budget; finished requests' blocks kept in the prefix index: up to {:.3f} "
        "MB\n",
        peak_kv_used / 1e6, kv_reserved_at_peak / 1e6, pool.budget_bytes / 1e6, peak_cached / 1e6);
    fmt::print(
        "  weights   : {:.3f} MB read once per pass for all its rows = {:.3f} MB per "
        "generated token (one request at a time: {:.3f} MB or more)\n",
        weight_bytes / 1e6,
        generated_total > 0 ? weight_bytes * steps / generated_total / 1e6 : 0.0,
        weight_bytes / 1e6);
    fmt::print("  time      : {:.3f} s, {:.1f} generated tokens/s, {:.1f} rows/s\n", seconds,
               gen_per_s, rows_per_s);
    fmt::print("  bytes/pass: weights {:.3f} MB + KV {:.3f} MB\n", weight_bytes / 1e6,
               rep.kv_bytes_per_step / 1e6);
    if (rep.peak.gbps > 0) print_achieved(rep.peak, gbps, rep.step_bytes(), std::cout);
  });
}
