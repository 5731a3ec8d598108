// The command line every chapter shares (CLI11), and the mapping from errors to exit codes.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/model_config.hpp"
#include "common/sampler.hpp"

namespace kvheap {

class Tokenizer;

/// \brief Flags common to every chapter's program.
struct CommonOptions {
  std::string model = "stories15m";  ///< preset name, llama2.c .bin path, or safetensors folder
  std::string tokenizer;             ///< llama2.c tokenizer.bin (optional)
  std::string prompt;                ///< text prompt (needs --tokenizer)
  std::string prompt_ids;            ///< comma-separated token ids
  int max_new_tokens = 64;           ///< generation stops after this many tokens
  float temperature = 0.0f;          ///< 0 = greedy
  float top_p = 0.9f;                ///< nucleus mass, used when temperature > 0
  std::uint64_t seed = 42;           ///< sampler seed
  std::uint64_t model_seed = 1;      ///< seed of synthetic weights for presets
  std::string device = "cpu";        ///< cpu or cuda
  std::string kv_dtype = "fp32";     ///< KV storage type: fp32, fp16, bf16
  double kv_budget_mb = 0.0;         ///< 0 = no cap
  int threads = 0;                   ///< 0 = all cores
  bool json = false;                 ///< print one JSON object instead of the report
  bool ignore_eos = false;           ///< generate exactly max_new_tokens
};

/// \brief Registers the shared flags on `app`.
void add_common_options(CLI::App& app, CommonOptions& o);

/// \brief Parses argv and runs `body`, turning every failure into one line on stderr and an exit
/// code: 0 success (or --help), 2 usage errors (unknown flag, malformed number, bad value),
/// 1 input or resource errors (bad file, exhausted budget, no device).
int run_cli(CLI::App& app, int argc, char** argv, const std::function<void()>& body);

/// \brief The tokenizer named by --tokenizer, checked against the model's vocabulary, or nullptr
/// when the flag is not given.
std::unique_ptr<Tokenizer> load_tokenizer(const CommonOptions& o, const ModelConfig& c);

/// \brief The prompt's token ids: --prompt-ids, or --prompt encoded with BOS by `tok`, or just BOS
/// when neither is given. Throws UsageError for both at once or --prompt without a tokenizer.
std::vector<int> resolve_prompt(const CommonOptions& o, const ModelConfig& c, const Tokenizer* tok);

/// \brief The sampler settings from the flags.
SamplerConfig sampler_config(const CommonOptions& o);

/// \brief Applies --threads to OpenMP and returns the thread count in use. Throws UsageError for
/// a negative count or more than 16 threads per core.
int apply_threads(const CommonOptions& o);

/// \brief --kv-budget-mb in bytes (0 = no cap). Throws UsageError for a negative, NaN or
/// infinite value, or one beyond what a byte count can hold.
std::size_t kv_budget_bytes(const CommonOptions& o);

}  // namespace kvheap
