// A workload: the requests one run serves, with their lengths and arrivals, as a JSONL file that
// every chapter program reads with --workload FILE. One JSON object per line (blank lines are
// skipped):
//
//   {"prompt_ids": [1, 403, 407], "max_new_tokens": 32, "arrival_s": 0.25}
//   {"prompt": "Once upon a time", "max_new_tokens": 16, "stop_ids": [13], "arrival_s": 0.5}
//
//   prompt_ids      the prompt as token ids (or "prompt": text, encoded with BOS; needs a
//                   tokenizer); exactly one of the two
//   max_new_tokens  tokens to generate at most (optional: --max-new-tokens)
//   stop_ids        tokens that end this request, besides the model's own (optional)
//   arrival_s       seconds after the start at which it arrives, against the wall clock (at most
//                   a day); or
//   arrival_step    the loop step before which it arrives (deterministic, for tests); one kind
//                   per file, never decreasing from line to line (optional: with the line
//                   before, the first at the start)
//
// scripts/make_workload.py writes seeded ones: a shared system prompt, prefix groups, lognormal
// lengths and Poisson arrivals.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/model/model_config.hpp"
#include "common/serving/serve.hpp"
#include "common/tokenizer/tokenizer.hpp"

namespace kvheap {

/// \brief Latest wall-clock arrival a workload may give, in seconds after the start: a day. The
/// loop sleeps until an arrival, so a later one is refused rather than waited for.
inline constexpr double kMaxArrivalSeconds = 86400.0;

/// \brief The requests of workload text `text` (the content of the file `name`, for messages),
/// checked against model `c`; `tok` encodes text prompts (nullptr: they are an error), and a line
/// without max_new_tokens gets `default_max_new_tokens`. Throws InputError naming the line and
/// the field for anything malformed: not an object, an unknown field, a missing or doubled
/// prompt, an id outside the vocabulary, a prompt and generation past the context, a negative,
/// non-finite or later than kMaxArrivalSeconds arrival, arrivals of both kinds or out of order, no
/// request or more than kMaxSeqs.
[[nodiscard]] std::vector<Request> parse_workload(std::string_view text, const std::string& name,
                                                  const ModelConfig& c, const Tokenizer* tok,
                                                  int default_max_new_tokens);

/// \brief parse_workload of the regular file `path`, read through the project's file checks.
[[nodiscard]] std::vector<Request> load_workload(const std::string& path, const ModelConfig& c,
                                                 const Tokenizer* tok, int default_max_new_tokens);

/// \brief The line of the workload format that gives `r` (ids, its arrival of either kind,
/// stop_ids when it has some), without the newline: parse_workload reads it back as `r`.
[[nodiscard]] std::string workload_line(const Request& r);

}  // namespace kvheap
