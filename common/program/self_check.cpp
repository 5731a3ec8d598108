#include "common/program/self_check.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <span>
#include <string>

#include "common/forward/reference_forward.hpp"
#include "common/serving/sampler.hpp"

namespace kvheap {

const std::vector<std::vector<int>>& self_check_prompts() {
  static const std::vector<std::vector<int>> prompts = {
      {1, 5, 9, 2, 77, 31, 4, 8, 3, 12}, {1, 5, 9, 2, 77, 31, 4, 8, 60, 61, 62}, {1, 70, 71}, {1}};
  return prompts;
}

void set_self_check_flags(CommonOptions& o) {
  o.model = "tiny";
  o.max_new_tokens = kSelfCheckTokens;
  o.temperature = 0.0f;
  o.ignore_eos = true;
  o.no_peak = true;
}

bool verify_against_reference(const ModelWeights& w, const std::vector<Request>& requests,
                              const ServeResult& res, DType wt, DType kv, std::ostream& os) {
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

}  // namespace kvheap
