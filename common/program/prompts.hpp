// The prompts a multi-sequence chapter serves: one per line of a file, or copies of one prompt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/program/cli.hpp"
#include "common/model/model_config.hpp"
#include "common/tokenizer/tokenizer.hpp"

namespace kvheap {

/// \brief Sequences one run serves at most: far more than a pool map or a report can show, and
/// few enough that a mistyped count is an error rather than an out-of-memory failure.
inline constexpr int kMaxSeqs = 1 << 16;

/// \brief Prompts: one per non-empty line of `prompts_file` (token ids, or text with a tokenizer),
/// else `copies` copies of --prompt / --prompt-ids. Throws UsageError for a count outside
/// 1..kMaxSeqs and InputError for an unreadable, empty, oversized or malformed file (naming the
/// line).
std::vector<std::vector<int>> load_prompts(const CommonOptions& o, int copies,
                                           const std::string& prompts_file, const ModelConfig& c,
                                           const Tokenizer* tok);

}  // namespace kvheap
