// ch03_paged_blocks: many sequences decoded together over a block pool with page tables.
//
// Sequences are admitted while the pool can hold their worst case (prompt + --max-new-tokens),
// prefilled in one batch, then decoded one row per live sequence per step. The report shows the
// pool like malloc statistics, the tail waste of paging against the waste of a max_seq_len
// reservation, how many sequences each policy fits in the budget, and tokens/s and GB/s.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>

#include "base/error.hpp"
#include "chapters/03_paged_blocks/paged_host_cache.hpp"
#include "chapters/03_paged_blocks/pool_report.hpp"
#include "common/bandwidth.hpp"
#include "common/cli.hpp"
#include "common/forward_cpu.hpp"
#include "common/generate.hpp"
#include "common/model_loader.hpp"
#include "common/pool.hpp"
#include "common/prompts.hpp"
#include "common/report.hpp"
#include "common/serve_options.hpp"
#include "common/tokenizer.hpp"

#if KVHEAP_HAS_CUDA
#include "chapters/03_paged_blocks/paged_gpu_cache.hpp"
#include "common/gpu/device_bandwidth.hpp"
#include "common/gpu/forward_gpu.hpp"
#include "device/device.hpp"
#endif

using namespace kvheap;
using namespace kvheap::ch03;

namespace {

struct Options : ServeOptions {
  std::string pool_map;
  int pool_map_every = 0;
};

/// One sequence being served.
struct Request {
  std::vector<int> prompt;
  std::vector<int> generated;
  std::string status = "waiting";  // waiting, running, stop token, max_new_tokens, not admitted
  int seq = -1;                    // BlockManager id
  std::unique_ptr<Sampler> sampler;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine cli{"kvheap chapter 3: paged blocks, page tables and paged attention",
                  "ch03_paged_blocks"};
  CommonOptions o;
  o.device = "cpu";
  add_common_options(cli, o);
  Options p;
  p.num_seqs = 4;
  add_serve_options(cli, p, "Sequences to serve (copies of the prompt)");
  const Flag pool_map =
      cli.option("--pool-map", p.pool_map, "Write an SVG map of the block pool to this file");
  cli.option("--pool-map-every", p.pool_map_every, "Also write FILE.stepN.svg every N steps")
      .needs(pool_map);

  return run_cli(cli, argc, argv, [&] {
    check_serve_options(o, p);
    if (p.pool_map_every < 0) throw UsageError("--pool-map-every must be >= 0");
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
    // Default budget: what chapter 2 reserves for these sequences (max_seq_len each).
    const PoolSize pool = pool_for_run(c, kv, budget_cap, reqs.size(), p.block_size, longest);
    const std::size_t budget = pool.budget_bytes;
    const int num_blocks = pool.num_blocks;

    // The backend: a paged cache and a forward pass over it.
    std::function<std::span<const float>(const Batch&)> forward;
    BlockManager* blocks = nullptr;
    std::unique_ptr<PagedHostCache> host_cache;
    std::unique_ptr<CpuForward> cpu_fwd;
    DecodeReport rep;
    rep.chapter = "03_paged_blocks";
    rep.model = c.name;
    rep.kv_dtype = kv;
    rep.weight_dtype = wt;
#if KVHEAP_HAS_CUDA
    std::unique_ptr<PagedGpuCache> gpu_cache;
    std::unique_ptr<GpuForward> gpu_fwd;
#endif
    if (o.device == "cpu") {
      rep.device = fmt::format("cpu ({} threads)", threads);
      if (!p.no_peak) {
        rep.peak = cpu_read_peak();
      }
      host_cache =
          std::make_unique<PagedHostCache>(c, kv, num_blocks, p.block_size, p.shuffle_seed);
      cpu_fwd = std::make_unique<CpuForward>(weights);
      blocks = &host_cache->blocks();
      forward = [&](const Batch& b) { return cpu_fwd->forward(b, *host_cache); };
    } else {
#if KVHEAP_HAS_CUDA
      const DeviceInfo info = require_cuda_device();
      rep.device = info.is_simulator ? info.name + " (not a performance model)" : info.name;
      if (!p.no_peak && !info.is_simulator) {
        rep.peak = gpu_copy_peak();
      }
      gpu_cache = std::make_unique<PagedGpuCache>(c, kv, num_blocks, p.block_size, p.shuffle_seed);
      gpu_fwd = std::make_unique<GpuForward>(weights, wt);
      blocks = &gpu_cache->blocks();
      forward = [&](const Batch& b) { return gpu_fwd->forward(b, *gpu_cache); };
#else
      throw ResourceError("--device cuda: this build has no CUDA support (configured with "
                          "KVHEAP_CUDA=off); rebuild with the cuda or sim preset, or use --device cpu");
#endif
    }

    // Admission: a sequence is admitted only if the pool can hold its worst case on top of the
    // worst cases already admitted, so no running sequence can run out of blocks (preemption,
    // which would allow more, is chapter 5's).
    long committed = 0;
    std::vector<std::string> refusals;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const long need =
          blocks->blocks_for(positions_stored(reqs[i].prompt.size(), o.max_new_tokens));
      if (committed + need > num_blocks) {
        reqs[i].status = "not admitted";
        refusals.push_back(
            fmt::format("sequence {} not admitted: its worst case needs {} blocks and "
                        "{} of the pool's {} are left",
                        i, need, num_blocks - committed, num_blocks));
        continue;
      }
      committed += need;
      reqs[i].seq = blocks->allocate(0);
      reqs[i].status = "running";
      SamplerConfig sc = sampler_config(o);
      sc.seed += i;
      reqs[i].sampler = std::make_unique<Sampler>(sc);
    }

    // Prefill every admitted prompt in one batch, then one decode row per running sequence.
    Batch batch;
    std::vector<int> row_owner;  // request index of each logit row
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i].status != "running") continue;
      const auto& pr = reqs[i].prompt;
      for (std::size_t t = 0; t < pr.size(); ++t)
        batch.rows.push_back({pr[t], reqs[i].seq, static_cast<int>(t), t + 1 == pr.size()});
      row_owner.push_back(static_cast<int>(i));
      rep.run.prompt.insert(rep.run.prompt.end(), pr.begin(), pr.end());
    }
    const GenerationConfig gen{o.max_new_tokens, sampler_config(o), o.ignore_eos};
    const std::size_t bpt = kv_bytes_per_token(c, kv);
    double kv_bytes_total = 0;
    long decode_rows = 0;  // tokens computed by decode steps, over all sequences
    int step = 0;
    auto t0 = std::chrono::steady_clock::now();
    if (o.max_new_tokens == 0)  // nothing to generate, so nothing runs
      for (Request& r : reqs)
        if (r.status == "running") r.status = "max_new_tokens";
    while (!batch.rows.empty() && o.max_new_tokens > 0) {
      const bool prefill = step == 0;
      if (!prefill) {
        decode_rows += batch.size();
        for (const auto& r : batch.rows) kv_bytes_total += static_cast<double>(r.pos + 1) * bpt;
      }
      const std::span<const float> logits = forward(batch);
      Batch next;
      std::vector<int> next_owner;
      for (std::size_t j = 0; j < row_owner.size(); ++j) {
        Request& r = reqs[row_owner[j]];
        const int tok_id = r.sampler->sample(logits.subspan(j * c.vocab_size, c.vocab_size));
        const std::string done = take_token(tok_id, c, gen, r.generated);
        if (!done.empty()) {
          r.status = done;
          continue;
        }
        next.rows.push_back(
            {tok_id, r.seq, static_cast<int>(r.prompt.size() + r.generated.size()) - 1, true});
        next_owner.push_back(row_owner[j]);
      }
      if (prefill) {
        rep.run.prefill_seconds = seconds_since(t0);
        t0 = std::chrono::steady_clock::now();
      } else {
        ++rep.run.decode_steps;
      }
      ++step;
      if (!p.pool_map.empty() && p.pool_map_every > 0 && step % p.pool_map_every == 0)
        write_pool_map(*blocks, fmt::format("{}.step{}.svg", p.pool_map, step),
                       fmt::format("step {}", step));
      batch = std::move(next);
      row_owner = std::move(next_owner);
    }
    rep.run.decode_seconds = step > 1 ? seconds_since(t0) : 0.0;

    // Snapshot before the sequences are freed.
    const PoolStats stats = pool_stats(*blocks, c, kv);
    if (!p.pool_map.empty())
      write_pool_map(*blocks, p.pool_map, fmt::format("{} after {} steps", c.name, step));
    std::size_t generated = 0;
    for (const auto& r : reqs) generated += r.generated.size();
    for (auto& r : reqs)
      if (r.seq >= 0) blocks->free(r.seq);
    blocks->check_invariants();
    if (blocks->pool().num_free() != num_blocks)
      throw std::logic_error("blocks leaked after every sequence finished");

    rep.kv_reserved_bytes = stats.slots_held * bpt;
    rep.kv_used_bytes = stats.tokens * bpt;
    rep.weight_bytes_per_step = static_cast<double>(weight_bytes_per_decode_step(c, wt));
    rep.kv_bytes_per_step = rep.run.decode_steps > 0 ? kv_bytes_total / rep.run.decode_steps : 0.0;
    const double tokens_per_s =
        rep.run.decode_seconds > 0 ? decode_rows / rep.run.decode_seconds : 0.0;
    const int admitted = static_cast<int>(reqs.size() - refusals.size());
    const std::size_t reservation = kv_bytes_for_context(c, kv, c.max_seq_len);
    const double avg_blocks =
        admitted > 0 ? static_cast<double>(stats.blocks_used) / admitted : 0.0;
    const int fit_contiguous = static_cast<int>(budget / reservation);
    const int fit_paged = avg_blocks > 0 ? static_cast<int>(num_blocks / avg_blocks) : 0;

    if (o.json) {
      nlohmann::json seqs = nlohmann::json::array(), ids = nlohmann::json::array();
      for (const auto& r : reqs) {
        nlohmann::json s = {
            {"prompt_ids", r.prompt}, {"generated_ids", r.generated}, {"status", r.status}};
        if (tok) s["text"] = tok->decode(r.generated);
        seqs.push_back(s);
        ids.push_back(r.generated);
      }
      nlohmann::json m = metrics_json(rep);
      m["decode_tokens_per_s"] = tokens_per_s;
      m["generated_tokens"] = generated;
      m["sequences_fit_contiguous"] = fit_contiguous;
      // null when nothing was stored: no average to extrapolate from
      m["sequences_fit_paged"] = fit_paged > 0 ? nlohmann::json(fit_paged) : nlohmann::json();
      m["kv_budget_bytes"] = budget;
      std::cout << json_line({{"chapter", rep.chapter},
                              {"model", c.name},
                              {"generated_ids", ids},
                              {"sequences", seqs},
                              {"not_admitted", refusals},
                              {"pool", pool_stats_json(stats)},
                              {"metrics", m}})
                << "\n";
      return;
    }
    std::cout << describe(c) << "\n";
    for (std::size_t i = 0; i < reqs.size(); ++i)
      fmt::print("sequence {}: {} prompt tokens, {} generated ({})\n", i, reqs[i].prompt.size(),
                 reqs[i].generated.size(), reqs[i].status);
    for (const auto& r : refusals) fmt::print("{}\n", r);
    fmt::print("kvheap {} | model {} | {} | KV {} | block size {} | budget {:.3f} MB\n",
               rep.chapter, c.name, rep.device, dtype_name(kv), p.block_size, budget / 1e6);
    print_pool_stats(stats, std::cout);
    fmt::print(
        "  sequences that fit the budget: {} reserving max_seq_len, {} paged "
        "(at this run's average of {:.1f} blocks per sequence)\n",
        fit_contiguous, fit_paged > 0 ? fmt::format("about {}", fit_paged) : "n/a", avg_blocks);
    fmt::print("  prefill : {} tokens in {:.3f} ms\n", rep.run.prompt.size(),
               rep.run.prefill_seconds * 1e3);
    fmt::print("  decode  : {} steps in {:.3f} ms = {:.1f} tokens/s over all sequences\n",
               rep.run.decode_steps, rep.run.decode_seconds * 1e3, tokens_per_s);
    fmt::print("  bytes/decode step: weights {:.3f} MB (read once for the batch) + KV {:.3f} MB\n",
               rep.weight_bytes_per_step / 1e6, rep.kv_bytes_per_step / 1e6);
    if (rep.peak.gbps > 0) print_achieved(rep.peak, rep.decode_gbps(), rep.step_bytes(), std::cout);
  });
}
