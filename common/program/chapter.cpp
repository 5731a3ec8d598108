#include "common/program/chapter.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <span>

#include "base/error.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/model/model_loader.hpp"
#include "common/program/prompts.hpp"
#include "common/program/self_check.hpp"
#include "common/serving/policy_report.hpp"
#include "common/serving/report.hpp"
#include "common/serving/sampler.hpp"
#include "common/tokenizer/tokenizer.hpp"
#include "common/program/workload.hpp"
#include "common/program/options.hpp"
#include "kernels/matmul.hpp"

namespace kvheap {
namespace {

constexpr int kSkipped = 77;  // ctest's SKIP_RETURN_CODE

/// --top2-gaps: whether to print each request's gaps (ServeResult's records hold them), and the
/// near-tie threshold of the run's element types.
struct Gaps {
  bool wanted = false;
  float near_tie = 0;
};

/// Prints a finished run: one JSON object, or the text report.
void print_run(const Chapter& chapter, const PolicyStats& stats, const RunReport& report,
               const ServeResult& res, const std::vector<Request>& requests, const ModelConfig& c,
               const Tokenizer* tok, bool json, const Gaps& top2, std::ostream& os) {
  const bool flat = chapter.one_request_flat && requests.size() == 1;
  if (json) {
    nlohmann::json root = {{"chapter", report.chapter},
                           {"model", c.name},
                           {"model_config",
                            {{"vocab_size", c.vocab_size},
                             {"max_seq_len", c.max_seq_len},
                             {"kv_bytes_per_token", kv_bytes_per_token(c, report.kv_dtype)}}},
                           {"metrics", metrics_json(report)},
                           {"serving", serving_json(report)}};
    if (flat) {
      root["prompt_ids"] = requests[0].prompt;
      root["generated_ids"] = res.requests[0].generated;
      if (tok != nullptr) root["text"] = tok->decode(res.requests[0].generated);
      if (top2.wanted) root["top2_gaps"] = res.requests[0].top2_gaps;
    } else {
      nlohmann::json seqs = nlohmann::json::array(), ids = nlohmann::json::array();
      for (std::size_t i = 0; i < requests.size(); ++i) {
        const RequestRecord& rec = res.requests[i];
        nlohmann::json s = {{"prompt_ids", requests[i].prompt},
                            {"generated_ids", rec.generated},
                            {"status", rec.status},
                            {"arrival_step", rec.arrival_step},
                            {"finish_step", rec.finish_step}};
        if (tok != nullptr) s["text"] = tok->decode(rec.generated);
        if (top2.wanted) s["top2_gaps"] = rec.top2_gaps;
        const double ttft =
            rec.first_token_seconds >= 0 ? rec.first_token_seconds - rec.arrival_seconds : -1.0;
        s["arrival_s"] = rec.arrival_seconds;
        s["ttft_s"] = ttft;
        add_request_json(stats.request(static_cast<int>(i)), s);
        seqs.push_back(s);
        ids.push_back(rec.generated);
      }
      root["generated_ids"] = ids;
      root["sequences"] = seqs;
    }
    root["not_admitted"] = res.refusals;
    if (top2.wanted) root["near_tie_gap"] = top2.near_tie;
    root["timeline"] = timeline_json(res.timeline);
    add_policy_json(stats, res, kv_bytes_per_token(c, report.kv_dtype), root);
    os << json_line(root) << "\n";
    return;
  }
  os << describe(c) << "\n";
  if (flat && tok != nullptr) {
    os << "text: " << tok->decode(res.requests[0].generated) << "\n";
  } else if (flat) {
    fmt::print(os, "generated ids: {}\n", fmt::join(res.requests[0].generated, ","));
  } else {
    for (std::size_t i = 0; i < requests.size(); ++i)
      fmt::print(os, "request {}: {} prompt tokens, {} generated ({}){}\n", i,
                 requests[i].prompt.size(), res.requests[i].generated.size(),
                 res.requests[i].status, describe_request(stats.request(static_cast<int>(i))));
    // One request with a tokenizer (--prompt, --chat): its answer, as the flat chapters print it.
    if (requests.size() == 1 && tok != nullptr)
      os << "text: " << tok->decode(res.requests[0].generated) << "\n";
  }
  for (const std::string& why : res.refusals) os << why << "\n";
  print_report(report, os);
  print_policy_stats(stats, res, kv_bytes_per_token(c, report.kv_dtype), os);
}

// Chapter::kv_in_host_memory: a budget the host's memory cannot back is refused up front.
void check_budget_fits_host(const CommonOptions& o) {
  const std::size_t host = physical_memory_bytes();
  if (host == 0)
    throw ResourceError("cannot read this host's physical memory size (sysconf failed)");
  if (o.kv_budget_mb > static_cast<double>(host) / 1e6)
    throw ResourceError(
        fmt::format("--kv-budget-mb {} asks for more than this host's physical memory ({:.0f} MB)",
                    o.kv_budget_mb, static_cast<double>(host) / 1e6));
}

// --device, after the chapter's rules: chapter 1 runs on the CPU only, chapter 2 also takes auto.
std::string run_device(const Chapter& chapter, const CommonOptions& o) {
  if (chapter.cpu_only && o.device != "cpu")
    throw UsageError(
        fmt::format("--device {}: chapter {} runs on the CPU only (cuda arrives in chapter 2); "
                    "expected --device cpu",
                    o.device, std::stoi(chapter.name)));
  if (chapter.default_device == "auto") return resolve_device(o.device);
  if (o.device != "cpu" && o.device != "cuda")
    throw UsageError(fmt::format("--device {}: expected cpu or cuda", o.device));
  return o.device;
}

// --bf16-products: how the CPU backend multiplies bf16 weights. Pairs only where they can run: a
// build for a CPU with AVX512-BF16, the CPU backend, and bf16 weights, refused in that order, so
// that the first refusal names what stands in the way.
cpu::Bf16Products bf16_products(const CommonOptions& o, const std::string& device, DType wt) {
  if (o.bf16_products == "widen") return cpu::Bf16Products::kWiden;
  if (o.bf16_products != "pairs")
    throw UsageError(fmt::format("--bf16-products {}: expected widen or pairs", o.bf16_products));
  if (!cpu::bf16_pairs_built())
    throw UsageError(
        "--bf16-products pairs needs a build for a CPU with AVX512-BF16 (vdpbf16ps); this one "
        "widens bf16 weights to fp32 (--bf16-products widen)");
  if (device != "cpu")
    throw UsageError(fmt::format(
        "--bf16-products pairs is for --device cpu; on {} the device's own bf16 products run",
        device));
  if (wt != DType::BF16)
    throw UsageError(fmt::format(
        "--bf16-products pairs multiplies bf16 weights, and these are {}: add --weight-dtype bf16",
        o.weight_dtype));
  return cpu::Bf16Products::kPairs;
}

// The requests to serve: a --workload file's, or one per prompt (the self-check's, --prompts, or
// --num-seqs copies of one), with the flags' stops, the chapter's shaping (forks) and each its own
// sampler seed.
std::vector<Request> requests_for(const Chapter& chapter, const CommonOptions& o,
                                  const ModelConfig& c, const Tokenizer* tok, bool self_check) {
  std::vector<Request> requests;
  if (!o.workload_file.empty()) {
    requests = load_workload(o.workload_file, c, tok, o.max_new_tokens);
  } else {
    const std::vector<std::vector<int>> prompts =
        self_check ? self_check_prompts() : load_prompts(o, o.num_seqs, o.prompts_file, c, tok);
    for (const std::vector<int>& prompt : prompts) {
      check_generation_fits(prompt.size(), o.max_new_tokens, c);
      Request r;
      r.prompt = prompt;
      r.max_new_tokens = o.max_new_tokens;
      requests.push_back(std::move(r));
    }
  }
  const std::vector<int> chat_stops = chat_stop_ids(o, tok);  // the end of the turn
  for (Request& r : requests) {
    r.ignore_eos = o.ignore_eos;
    r.stop_ids.insert(r.stop_ids.end(), chat_stops.begin(), chat_stops.end());
  }
  if (chapter.shape_requests) chapter.shape_requests(requests);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    requests[i].sampling = sampler_config(o);
    requests[i].sampling.seed += i;  // each request draws its own tokens
  }
  return requests;
}

// The run's report: the loop's measurements with the run's settings and the backend's peak.
RunReport run_report(const Chapter& chapter, const ServeResult& res,
                     const std::vector<Request>& requests, const ModelConfig& c, DType kv, DType wt,
                     const PolicyStats& stats, const Backend& backend) {
  RunReport report = make_report(res, requests, c, kv, stats.mixed_passes);
  report.chapter = chapter.name;
  report.device = backend.device_name();
  report.weight_dtype = wt;
  report.products = backend.products();
  report.weight_setup_seconds = backend.setup_seconds();
  report.kv_budget_bytes = stats.budget_bytes;
  report.weight_bytes_per_step = static_cast<double>(weight_bytes_per_decode_step(c, wt));
  report.peak = backend.peak();
  return report;
}

}  // namespace

int run_chapter(const Chapter& chapter, int argc, char** argv) {
  const std::string program = "ch" + chapter.name;
  CommandLine cli{chapter.title, program};
  CommonOptions o;
  o.device = chapter.default_device;
  o.num_seqs = chapter.default_num_seqs;
  add_common_options(cli, o, chapter.num_seqs_help);
  bool self_check = false;
  Flag check = cli.flag("--self-check", self_check,
                        "Run on the tiny model and compare every request's greedy ids with "
                        "the reference forward pass; prints Disposition: Passed or Failed");
  for (const char* set :
       {"--model", "--tokenizer", "--prompt", "--prompt-ids", "--chat", "--prompts", "--workload",
        "--num-seqs", "--max-new-tokens", "--temperature", "--json", "--top2-gaps"})
    check.excludes(cli.get(set));
  if (chapter.add_flags) chapter.add_flags(cli);

  int status = 0;
  const int parsed = run_cli(cli, argc, argv, [&] {
    if (self_check) {
      set_self_check_flags(o);
      if (chapter.configure_self_check) chapter.configure_self_check(o);
    }
    const std::string device = run_device(chapter, o);
    const DType kv = parse_dtype(o.kv_dtype);
    const DType wt = parse_dtype(o.weight_dtype);
    const cpu::Bf16Products bf16 = bf16_products(o, device, wt);
    const std::size_t budget_cap = kv_budget_bytes(o);
    if (chapter.kv_in_host_memory) check_budget_fits_host(o);
    if (chapter.check_flags) chapter.check_flags(o);
    const int threads = apply_threads(o);
    if (self_check && device == "cuda" && !cuda_device_available()) {
      fmt::print("self-check of {}: no CUDA device here\nDisposition: Skipped\n", chapter.name);
      status = kSkipped;
      return;
    }
    o.model = resolve_model_name(o.model);  // a fetched model's name -> its file
    const ModelWeights weights = load_model(o.model, o.model_seed);
    const ModelConfig& c = weights.config;
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(o, c);

    const std::vector<Request> requests = requests_for(chapter, o, c, tok.get(), self_check);
    long longest = 0;
    for (const Request& r : requests)
      longest = std::max(longest, positions_stored(r.prompt.size(), r.max_new_tokens));

    const std::unique_ptr<Backend> backend = make_backend(weights, {.device = device,
                                                                    .weights = wt,
                                                                    .bf16 = bf16,
                                                                    .measure_peak = !o.no_peak,
                                                                    .threads = threads});
    const Run run{o, c, *backend, kv, budget_cap, requests, longest};
    const std::unique_ptr<ServingPolicy> policy = chapter.make_policy(run);
    ServeHooks hooks;
    hooks.after_step = chapter.after_step;
    if (!self_check) {
      hooks.progress = &std::cerr;
      hooks.progress_label = program;
    }
    const ServeResult res = serve(*policy, *backend, requests, c, hooks);
    const PolicyStats stats = policy->stats();

    if (self_check) {
      fmt::print(
          "self-check of {} on {} ({}, KV {}): {} requests of {} greedy tokens against the "
          "reference forward pass (full recomputation, no cache)\n",
          chapter.name, c.name, backend->device_name(), dtype_name(kv), requests.size(),
          kSelfCheckTokens);
      // What the chapter's policy did on the way.
      print_policy_stats(stats, res, kv_bytes_per_token(c, kv), std::cout);
      if (!verify_against_reference(weights, requests, res, wt, kv, std::cout))
        throw Error("self-check failed: a request's ids differ from the reference forward pass");
      return;
    }
    const RunReport report = run_report(chapter, res, requests, c, kv, wt, stats, *backend);
    const Gaps top2{o.top2_gaps, near_tie(wt, kv)};
    print_run(chapter, stats, report, res, requests, c, tok.get(), o.json, top2, std::cout);
    // The report stands, but a run that turned requests away did not do what was asked.
    if (report.not_admitted > 0)
      throw ResourceError(
          fmt::format("{} of {} requests not admitted: {}", report.not_admitted, report.requests,
                      res.refusals.empty() ? std::string("they cannot fit the KV pool")
                                           : res.refusals.front()));
  });
  return parsed != 0 ? parsed : status;
}

}  // namespace kvheap
