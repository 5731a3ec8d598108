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
#include "common/forward/reference_forward.hpp"
#include "common/serving/report.hpp"
#include "common/serving/sampler.hpp"
#include "common/tokenizer/tokenizer.hpp"
#include "common/program/workload.hpp"

namespace kvheap {
namespace {

// The self-check's requests: prompts of the tiny model's vocabulary that begin alike (so that a
// sharing cache shares) and of different lengths (so that blocks fill unevenly), 12 greedy
// tokens each.
const std::vector<std::vector<int>> kSelfCheckPrompts = {
    {1, 5, 9, 2, 77, 31, 4, 8, 3, 12}, {1, 5, 9, 2, 77, 31, 4, 8, 60, 61, 62}, {1, 70, 71}, {1}};
constexpr int kSelfCheckTokens = 12;
constexpr int kSkipped = 77;  // ctest's SKIP_RETURN_CODE

/// Compares every request's greedy ids with the reference forward pass (full recomputation
/// without a cache), teacher-forced along the chapter's own tokens; prints one line per request
/// and the disposition. Returns true when every token agrees, up to a reported near tie.
bool verify(const ModelWeights& w, const std::vector<Request>& requests, const ServeResult& res,
            DType wt, DType kv, std::ostream& os) {
  const int V = w.config.vocab_size;
  const float tie = near_tie(wt, kv);
  bool passed = true;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    const RequestRecord& rec = res.requests[i];
    if (static_cast<int>(rec.generated.size()) != r.max_new_tokens) {
      fmt::print(os, "  request {}: {} of {} tokens generated ({}): FAILED\n", i,
                 rec.generated.size(), r.max_new_tokens, rec.status);
      passed = false;
      continue;
    }
    std::vector<int> tokens = r.prompt;
    tokens.insert(tokens.end(), rec.generated.begin(), rec.generated.end());
    const std::vector<float> ref = reference_logits(w, tokens);
    std::string verdict =
        fmt::format("{} of {} tokens equal", rec.generated.size(), rec.generated.size());
    for (std::size_t t = 0; t < rec.generated.size(); ++t) {
      const std::span<const float> row(&ref[(r.prompt.size() - 1 + t) * V], V);
      const int want = argmax(row);
      if (want == rec.generated[t]) continue;
      const float gap = top2_gap(row);
      if (gap < tie) {
        verdict = fmt::format("{} of {} tokens equal, then a near tie (top-2 gap {:.2g})", t,
                              rec.generated.size(), gap);
      } else {
        verdict = fmt::format(
            "token {} is {} where the reference gives {} (top-2 gap {:.2g}): "
            "FAILED",
            t, rec.generated[t], want, gap);
        passed = false;
      }
      break;
    }
    fmt::print(os, "  request {}: {} prompt tokens, {}\n", i, r.prompt.size(), verdict);
  }
  fmt::print(os, "Disposition: {}\n", passed ? "Passed" : "Failed");
  return passed;
}

/// --top2-gaps: whether to print each request's gaps (ServeResult's records hold them), and the
/// near-tie threshold of the run's element types.
struct Gaps {
  bool wanted = false;
  float near_tie = 0;
};

/// Prints a finished run: one JSON object, or the text report.
void print_run(const Chapter& chapter, const ServingPolicy& policy, const RunReport& report,
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
        policy.add_request_json(static_cast<int>(i), s);
        seqs.push_back(s);
        ids.push_back(rec.generated);
      }
      root["generated_ids"] = ids;
      root["sequences"] = seqs;
    }
    root["not_admitted"] = res.refusals;
    if (top2.wanted) root["near_tie_gap"] = top2.near_tie;
    root["timeline"] = timeline_json(res.timeline);
    policy.add_json(root, res);
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
                 res.requests[i].status, policy.describe_request(static_cast<int>(i)));
    // One request with a tokenizer (--prompt, --chat): its answer, as the flat chapters print it.
    if (requests.size() == 1 && tok != nullptr)
      os << "text: " << tok->decode(res.requests[0].generated) << "\n";
  }
  for (const std::string& why : res.refusals) os << why << "\n";
  print_report(report, os);
  policy.print(os, res);
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
      o.model = "tiny";
      o.max_new_tokens = kSelfCheckTokens;
      o.temperature = 0.0f;
      o.ignore_eos = true;
      o.no_peak = true;
      if (chapter.configure_self_check) chapter.configure_self_check(o);
    }
    std::string device = o.device;
    if (chapter.cpu_only && device != "cpu")
      throw UsageError(
          fmt::format("--device {}: chapter {} runs on the CPU only (cuda arrives in chapter 2); "
                      "expected --device cpu",
                      device, std::stoi(chapter.name)));
    if (chapter.default_device == "auto") {
      device = resolve_device(o.device);
    } else if (device != "cpu" && device != "cuda") {
      throw UsageError(fmt::format("--device {}: expected cpu or cuda", device));
    }
    const DType kv = parse_dtype(o.kv_dtype);
    const DType wt = parse_dtype(o.weight_dtype);
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

    std::vector<Request> requests;
    if (!o.workload_file.empty()) {
      requests = load_workload(o.workload_file, c, tok.get(), o.max_new_tokens);
    } else {
      const std::vector<std::vector<int>> prompts =
          self_check ? kSelfCheckPrompts
                     : load_prompts(o, o.num_seqs, o.prompts_file, c, tok.get());
      for (const std::vector<int>& prompt : prompts) {
        check_generation_fits(prompt.size(), o.max_new_tokens, c);
        Request r;
        r.prompt = prompt;
        r.max_new_tokens = o.max_new_tokens;
        requests.push_back(std::move(r));
      }
    }
    const std::vector<int> chat_stops = chat_stop_ids(o, tok.get());  // the end of the turn
    for (Request& r : requests) {
      r.ignore_eos = o.ignore_eos;
      r.stop_ids.insert(r.stop_ids.end(), chat_stops.begin(), chat_stops.end());
    }
    if (chapter.shape_requests) chapter.shape_requests(requests);
    long longest = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      requests[i].sampling = sampler_config(o);
      requests[i].sampling.seed += i;  // each request draws its own tokens
      longest = std::max(longest,
                         positions_stored(requests[i].prompt.size(), requests[i].max_new_tokens));
    }

    const std::unique_ptr<Backend> backend = make_backend(
        weights, {.device = device, .weights = wt, .measure_peak = !o.no_peak, .threads = threads});
    const Run run{o, c, *backend, kv, budget_cap, requests, longest};
    const std::unique_ptr<ServingPolicy> policy = chapter.make_policy(run);
    ServeHooks hooks;
    hooks.after_step = chapter.after_step;
    if (!self_check) {
      hooks.progress = &std::cerr;
      hooks.progress_label = program;
    }
    const ServeResult res = serve(*policy, *backend, requests, c, hooks);

    if (self_check) {
      fmt::print(
          "self-check of {} on {} ({}, KV {}): {} requests of {} greedy tokens against the "
          "reference forward pass (full recomputation, no cache)\n",
          chapter.name, c.name, backend->device_name(), dtype_name(kv), requests.size(),
          kSelfCheckTokens);
      policy->print(std::cout, res);  // what the chapter's policy did on the way
      if (!verify(weights, requests, res, wt, kv, std::cout))
        throw Error("self-check failed: a request's ids differ from the reference forward pass");
      return;
    }
    RunReport report = make_report(res, requests, c, kv, policy->mixed_passes());
    report.chapter = chapter.name;
    report.device = backend->device_name();
    report.weight_dtype = wt;
    report.kv_budget_bytes = policy->budget_bytes();
    report.weight_bytes_per_step = static_cast<double>(weight_bytes_per_decode_step(c, wt));
    report.peak = backend->peak();
    const Gaps top2{o.top2_gaps, near_tie(wt, kv)};
    print_run(chapter, *policy, report, res, requests, c, tok.get(), o.json, top2, std::cout);
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
