// ch04_cow_prefix_sharing: prompts that begin alike and samples of one prompt, over shared blocks.
//
// Each prompt is admitted while the pool can hold its worst case, counting the blocks it will
// share (admission.hpp). Prompts are prefilled one per pass, in order, so each finds the full
// blocks of those before it in the prefix index and computes only the rest. Each prompt is then
// forked into --samples sequences that share all of its blocks, and every sequence decodes one row
// per step; a sample's first token copies the prompt's partly filled last block (copy-on-write).
// The report counts what sharing saved: prompt positions computed, blocks stored, copies made.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>

#include "base/error.hpp"
#include "chapters/03_paged_blocks/paged_host_cache.hpp"
#include "chapters/04_cow_prefix_sharing/admission.hpp"
#include "chapters/04_cow_prefix_sharing/shared_backend.hpp"
#include "common/cli.hpp"
#include "common/generate.hpp"
#include "common/model_loader.hpp"
#include "common/pool.hpp"
#include "common/prompts.hpp"
#include "common/report.hpp"
#include "common/serve_options.hpp"
#include "common/tokenizer.hpp"

using namespace kvheap;
using namespace kvheap::ch04;

namespace {

struct Options : ServeOptions {
  int samples = 4;
  bool no_read_once = false;
};

/// One prompt being served.
struct Request {
  std::vector<int> prompt;
  RequestPlan plan;
  bool admitted = false;
  int reused = 0;  // prompt positions taken from the prefix index
};

/// One sample of a request: a sequence of its own once forked.
struct Sample {
  int request = 0;
  int seq = -1;  // SharedBlockManager id
  std::vector<int> generated;
  std::string status = "waiting";  // running, stop token, max_new_tokens, not admitted
  std::unique_ptr<Sampler> sampler;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine cli{"kvheap chapter 4: reference-counted blocks, fork, copy-on-write, prefix index",
                  "ch04_cow_prefix_sharing"};
  CommonOptions o;
  o.device = "cpu";
  add_common_options(cli, o);
  Options p;
  add_serve_options(cli, p, "Prompts to serve (copies of the prompt)");
  cli.option("--samples", p.samples, "Sequences forked from each prompt").show_default();
  cli.flag("--no-read-once", p.no_read_once,
           "Every row reads its whole context, shared prefixes included (chapter 3's attention)");

  return run_cli(cli, argc, argv, [&] {
    check_serve_options(o, p);
    if (p.samples <= 0 || p.samples > kMaxSeqs)
      throw UsageError(
          fmt::format("--samples must be from 1 to {}, got {}", kMaxSeqs, p.samples));
    const std::size_t budget_cap = kv_budget_bytes(o);
    const DType kv = parse_dtype(o.kv_dtype);
    const DType wt = parse_dtype(p.weight_dtype);
    const int threads = apply_threads(o);
    const ModelWeights weights = load_model(o.model, o.model_seed);
    const ModelConfig& c = weights.config;
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(o, c);
    std::vector<Request> reqs;
    long longest = 0;
    for (auto& pr : load_prompts(o, p.num_seqs, p.prompts_file, c, tok.get())) {
      check_generation_fits(pr.size(), o.max_new_tokens, c);
      longest = std::max(longest, positions_stored(pr.size(), o.max_new_tokens));
      Request r;
      r.prompt = std::move(pr);
      reqs.push_back(std::move(r));
    }
    if (static_cast<long>(reqs.size()) * p.samples > kMaxSeqs)
      throw UsageError(fmt::format("{} prompts x {} samples is more than {} sequences", reqs.size(),
                                   p.samples, kMaxSeqs));
    const std::size_t num_sequences = reqs.size() * p.samples;
    // Default budget: what chapter 2 reserves for these sequences (max_seq_len each).
    const PoolSize pool =
        pool_for_run(c, kv, budget_cap, num_sequences, p.block_size, longest);
    const std::size_t budget = pool.budget_bytes;
    const int num_blocks = pool.num_blocks;

    DecodeReport rep;
    rep.chapter = "04_cow_prefix_sharing";
    rep.model = c.name;
    rep.kv_dtype = kv;
    rep.weight_dtype = wt;

    // The backend: a sharing cache and a forward pass over it, in host or device memory.
    SharedBackend backend(weights, {.device = o.device,
                                    .kv = kv,
                                    .weights = wt,
                                    .num_blocks = num_blocks,
                                    .block_size = p.block_size,
                                    .shuffle_seed = p.shuffle_seed,
                                    .read_once = !p.no_read_once,
                                    .measure_peak = !p.no_peak,
                                    .threads = threads});
    rep.device = backend.device_name();
    rep.peak = backend.peak();
    const auto forward = [&](const Batch& b) { return backend.forward(b); };
    SharedBlockManager& blocks = backend.blocks();

    // Admission: a request is admitted only if the pool can hold its worst case on top of those
    // already admitted, counting the prompt blocks it will find in the prefix index.
    long committed = 0;
    std::vector<std::string> refusals;
    std::vector<std::vector<int>> admitted_prompts;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      Request& r = reqs[i];
      r.plan = plan_request(r.prompt, admitted_prompts, p.samples, o.max_new_tokens, p.block_size);
      if (committed + r.plan.need > num_blocks) {
        refusals.push_back(fmt::format(
            "prompt {} not admitted: its {} samples need up to {} blocks beyond the {} they "
            "share, and {} of the pool's {} are left",
            i, p.samples, r.plan.need, r.plan.reused_blocks, num_blocks - committed, num_blocks));
        continue;
      }
      committed += r.plan.need;
      r.admitted = true;
      admitted_prompts.push_back(r.prompt);
    }

    // Prefill one prompt per pass, then fork it into its samples, each sampling its first token
    // from the same logits with its own seed.
    const GenerationConfig gen{o.max_new_tokens, sampler_config(o), o.ignore_eos};
    std::vector<Sample> samples;
    Batch batch;
    std::vector<int> row_owner;  // sample index of each logit row
    const auto t_prefill = std::chrono::steady_clock::now();
    long prompt_positions = 0;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      Request& r = reqs[i];
      for (int k = 0; k < p.samples; ++k) {
        Sample s;
        s.request = static_cast<int>(i);
        s.status = r.admitted ? "running" : "not admitted";
        samples.push_back(std::move(s));
      }
      if (!r.admitted) continue;
      if (o.max_new_tokens == 0) {  // nothing to generate, so nothing runs
        for (std::size_t k = samples.size() - p.samples; k < samples.size(); ++k)
          samples[k].status = "max_new_tokens";
        continue;
      }
      const int seq = blocks.allocate(r.prompt);
      r.reused = blocks.length(seq);
      prompt_positions += static_cast<long>(r.prompt.size());
      Batch prefill;
      for (int t = r.reused; t < static_cast<int>(r.prompt.size()); ++t)
        prefill.rows.push_back({r.prompt[t], seq, t, t + 1 == static_cast<int>(r.prompt.size())});
      rep.run.prompt.insert(rep.run.prompt.end(), r.prompt.begin(), r.prompt.end());
      const std::span<const float> logits = forward(prefill);
      const std::size_t first = samples.size() - p.samples;
      for (int k = 0; k < p.samples; ++k) {
        Sample& s = samples[first + k];
        s.seq = k == 0 ? seq : blocks.fork(seq);
        SamplerConfig sc = sampler_config(o);
        sc.seed += first + k;
        s.sampler = std::make_unique<Sampler>(sc);
        const int tok_id = s.sampler->sample(logits.first(c.vocab_size));
        const std::string done = take_token(tok_id, c, gen, s.generated);
        if (!done.empty()) {
          s.status = done;
          continue;
        }
        batch.rows.push_back({tok_id, s.seq, static_cast<int>(r.prompt.size()), true});
        row_owner.push_back(static_cast<int>(first + k));
      }
    }
    rep.run.prefill_seconds = seconds_since(t_prefill);

    // Decode: one row per running sample per step.
    const std::size_t bpt = kv_bytes_per_token(c, kv);
    double kv_bytes_total = 0, kv_bytes_unshared = 0;
    long decode_rows = 0;
    const auto t_decode = std::chrono::steady_clock::now();
    while (!batch.rows.empty()) {
      decode_rows += batch.size();
      const std::span<const float> logits = forward(batch);
      // What attention read: with read-once, each shared prefix once for all its rows.
      kv_bytes_total += static_cast<double>(backend.positions_read()) * bpt;
      for (const auto& r : batch.rows) kv_bytes_unshared += static_cast<double>(r.pos + 1) * bpt;
      ++rep.run.decode_steps;
      Batch next;
      std::vector<int> next_owner;
      for (std::size_t j = 0; j < row_owner.size(); ++j) {
        Sample& s = samples[row_owner[j]];
        const int tok_id = s.sampler->sample(logits.subspan(j * c.vocab_size, c.vocab_size));
        const std::string done = take_token(tok_id, c, gen, s.generated);
        if (!done.empty()) {
          s.status = done;
          continue;
        }
        const int pos = static_cast<int>(reqs[s.request].prompt.size() + s.generated.size()) - 1;
        next.rows.push_back({tok_id, s.seq, pos, true});
        next_owner.push_back(row_owner[j]);
      }
      batch = std::move(next);
      row_owner = std::move(next_owner);
    }
    rep.run.decode_seconds = rep.run.decode_steps > 0 ? seconds_since(t_decode) : 0.0;

    // Snapshot before the sequences are freed (nothing is freed earlier, so this is the run's
    // largest state), then check that every block comes back: after
    // the last free, only the prefix index may hold blocks.
    const long blocks_held = blocks.blocks_held();
    const long blocks_referenced = blocks.blocks_referenced();
    rep.kv_reserved_bytes = backend.bytes_reserved();
    rep.kv_used_bytes = backend.bytes_used();
    const SharingCounters counters = blocks.counters();
    std::size_t generated = 0;
    for (Sample& s : samples) {
      generated += s.generated.size();
      if (s.seq >= 0) blocks.free(s.seq);
    }
    blocks.check_invariants();
    if (blocks.pool().num_used() != static_cast<int>(blocks.index().size()))
      throw std::logic_error("blocks leaked after every sequence finished");

    rep.weight_bytes_per_step = static_cast<double>(weight_bytes_per_decode_step(c, wt));
    rep.kv_bytes_per_step = rep.run.decode_steps > 0 ? kv_bytes_total / rep.run.decode_steps : 0.0;
    const double tokens_per_s =
        rep.run.decode_seconds > 0 ? decode_rows / rep.run.decode_seconds : 0.0;
    const long computed = prompt_positions - counters.tokens_reused;
    const double kv_unshared_per_step =
        rep.run.decode_steps > 0 ? kv_bytes_unshared / rep.run.decode_steps : 0.0;

    if (o.json) {
      nlohmann::json seqs = nlohmann::json::array(), ids = nlohmann::json::array();
      for (const Sample& s : samples) {
        const Request& r = reqs[s.request];
        nlohmann::json j = {{"request", s.request},
                            {"prompt_ids", r.prompt},
                            {"prompt_tokens_reused", r.reused},
                            {"generated_ids", s.generated},
                            {"status", s.status}};
        if (tok) j["text"] = tok->decode(s.generated);
        seqs.push_back(j);
        ids.push_back(s.generated);
      }
      nlohmann::json m = metrics_json(rep);
      m["decode_tokens_per_s"] = tokens_per_s;
      m["generated_tokens"] = generated;
      m["kv_budget_bytes"] = budget;
      const nlohmann::json sharing = {{"block_size", p.block_size},
                                      {"blocks_total", num_blocks},
                                      {"prompt_positions", prompt_positions},
                                      {"prompt_positions_reused", counters.tokens_reused},
                                      {"blocks_held", blocks_held},
                                      {"blocks_referenced", blocks_referenced},
                                      {"forks", counters.forks},
                                      {"copies_on_write", counters.copies_on_write},
                                      {"evictions", counters.evictions},
                                      {"read_once", !p.no_read_once},
                                      {"kv_bytes_per_step_unshared", kv_unshared_per_step}};
      std::cout << json_line({{"chapter", rep.chapter},
                              {"model", c.name},
                              {"generated_ids", ids},
                              {"sequences", seqs},
                              {"not_admitted", refusals},
                              {"sharing", sharing},
                              {"metrics", m}})
                << "\n";
      return;
    }
    std::cout << describe(c) << "\n";
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const Sample& s = samples[i];
      fmt::print(
          "sequence {} (prompt {}): {} prompt tokens ({} from the cache), {} generated ({})\n", i,
          s.request, reqs[s.request].prompt.size(), reqs[s.request].reused, s.generated.size(),
          s.status);
    }
    for (const auto& r : refusals) fmt::print("{}\n", r);
    fmt::print("kvheap {} | model {} | {} | KV {} | block size {} | budget {:.3f} MB\n",
               rep.chapter, c.name, rep.device, dtype_name(kv), p.block_size, budget / 1e6);
    fmt::print(
        "  computed once: {} of {} prompt positions computed, {} taken from the prefix index\n",
        computed, prompt_positions, counters.tokens_reused);
    fmt::print(
        "  stored once  : {} blocks held where unshared page tables would hold {} ({:.1f} %); "
        "{} forks, {} copies on write, {} evictions\n",
        blocks_held, blocks_referenced,
        blocks_referenced > 0 ? 100.0 * blocks_held / blocks_referenced : 0.0, counters.forks,
        counters.copies_on_write, counters.evictions);
    fmt::print("  KV reserved {:.3f} MB, holding tokens {:.3f} MB\n", rep.kv_reserved_bytes / 1e6,
               rep.kv_used_bytes / 1e6);
    fmt::print("  prefill : {} passes, {} positions in {:.3f} ms\n", admitted_prompts.size(),
               computed, rep.run.prefill_seconds * 1e3);
    fmt::print("  decode  : {} steps in {:.3f} ms = {:.1f} tokens/s over all sequences\n",
               rep.run.decode_steps, rep.run.decode_seconds * 1e3, tokens_per_s);
    fmt::print(
        "  read once    : KV read per decode step {:.3f} MB where every row reading its whole "
        "context reads {:.3f} MB{}\n",
        rep.kv_bytes_per_step / 1e6, kv_unshared_per_step / 1e6,
        p.no_read_once ? " (--no-read-once: the same)" : "");
    fmt::print("  bytes/decode step: weights {:.3f} MB (read once for the batch) + KV {:.3f} MB\n",
               rep.weight_bytes_per_step / 1e6, rep.kv_bytes_per_step / 1e6);
    if (rep.peak.gbps > 0) print_achieved(rep.peak, rep.decode_gbps(), rep.step_bytes(), std::cout);
  });
}
