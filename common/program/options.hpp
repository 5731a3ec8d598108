// What the shared flags resolve to, once parsed (common/program/cli.hpp registers them): the
// tokenizer, the prompt, the chat's stop token, the model's configuration, the sampler, the
// threads and the KV budget in bytes.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/model/model_config.hpp"
#include "common/program/cli.hpp"
#include "common/serving/sampler.hpp"

namespace kvheap {

class Tokenizer;

/// \brief The tokenizer named by --tokenizer (a file or a model folder), else the one the
/// --model folder ships, checked against the model's embedding rows; nullptr when there is none.
std::unique_ptr<Tokenizer> load_tokenizer(const CommonOptions& o, const ModelConfig& c);

/// \brief The prompt's token ids: --prompt-ids, or --prompt encoded with BOS by `tok`, or --chat
/// wrapped in the model's chat format (common/tokenizer/chat_format.hpp), or just BOS when none is
/// given. Throws UsageError for two at once or text without a tokenizer, and InputError when no
/// chat format fits the model.
std::vector<int> resolve_prompt(const CommonOptions& o, const ModelConfig& c, const Tokenizer* tok);

/// \brief With --chat, the token that ends the assistant's turn in the chat format, which ends
/// each request too; empty without --chat.
std::vector<int> chat_stop_ids(const CommonOptions& o, const Tokenizer* tok);

/// \brief The configuration of --model: a preset's, or a model file's (a fetched model's name
/// resolved first), for programs that need the shapes but not the weights.
[[nodiscard]] ModelConfig model_config_of(const std::string& model);

/// \brief The sampler settings from the flags.
SamplerConfig sampler_config(const CommonOptions& o);

/// \brief Applies --threads to OpenMP and returns the thread count in use. Throws UsageError for
/// a negative count or more than 16 threads per core.
int apply_threads(const CommonOptions& o);

/// \brief --kv-budget-mb in bytes (0 = the chapter's default: no cap in chapter 1; a pool of
/// max_seq_len for every request in chapters 2-5). Throws UsageError for a negative, NaN or
/// infinite value, or one beyond what a byte count can hold.
std::size_t kv_budget_bytes(const CommonOptions& o);

}  // namespace kvheap
