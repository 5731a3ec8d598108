// The command line every chapter shares, and the mapping from errors to exit codes; what the
// flags resolve to once parsed is common/program/options.hpp.
//
// CLI11 parses it. Debian's CLI11 (2.1) is header-only, so every file that includes it compiles
// its whole parser again: about 15 s of compiler time at -O3 for a program that registers a few
// flags, in each of a dozen programs, benchmarks and fuzz entry points, in every build of the
// test suite. So only cli.cpp includes CLI11, and a program declares its flags through the small
// interface below (CommandLine, Flag), which hands each declaration to CLI11 unchanged.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/model/model_config.hpp"
#include "common/serving/sampler.hpp"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace kvheap {

/// \brief One flag of a CommandLine, as registered: what may still be said about it.
class Flag {
 public:
  /// \brief Wraps CLI11's option (CommandLine makes these).
  explicit Flag(CLI::Option* option) : option_(option) {}
  /// \brief Shows the variable's value at registration in --help as the flag's default.
  Flag& show_default();
  /// \brief Refuses a command line that gives both this flag and `other` (exit code 2).
  Flag& excludes(const Flag& other);
  /// \brief Refuses a command line that gives this flag without `other` (exit code 2).
  Flag& needs(const Flag& other);
  /// \brief Refuses an empty value (exit code 2), saying that `expected` was expected.
  Flag& not_empty(const std::string& expected);
  /// \brief Whether the parsed command line gave this flag.
  [[nodiscard]] bool given() const;
  /// \brief CLI11's option, for code that includes CLI11 (cli.cpp).
  [[nodiscard]] CLI::Option* cli11() const { return option_; }

 private:
  CLI::Option* option_;
};

/// \brief The variable types a CommandLine option parses into (cli.cpp instantiates each).
template <class T>
concept FlagValue = std::same_as<T, std::string> || std::same_as<T, int> || std::same_as<T, long> ||
    std::same_as<T, std::uint64_t> || std::same_as<T, float> || std::same_as<T, double>;

/// \brief A program's flags: registered into the caller's variables, then parsed by run_cli.
///
/// A number flag refuses an empty value and, for an unsigned variable, a negative or overflowing
/// one, which CLI11 would otherwise read as 0 or wrap around: silent wrong answers.
class CommandLine {
 public:
  /// \brief A command line with --help; `program` names it in messages (argv[0] when empty).
  explicit CommandLine(const std::string& description, const std::string& program = "");
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  /// \brief Registers `name VALUE`, parsed into `value` when given.
  template <FlagValue T>
  Flag option(const std::string& name, T& value, const std::string& help);
  /// \brief Registers the switch `name`: `value` becomes true when given.
  Flag flag(const std::string& name, bool& value, const std::string& help);
  /// \brief The flag registered as `name`; throws std::logic_error when there is none.
  [[nodiscard]] Flag get(const std::string& name);

  /// \brief Parses argv into the registered variables. Throws UsageError with CLI11's message
  /// for a malformed command line, and for --help (which run_cli answers with the usage text).
  void parse(int argc, const char* const* argv);

 private:
  friend int run_cli(CommandLine& cli, int argc, char** argv, const std::function<void()>& body);
  std::unique_ptr<CLI::App> app_;
};

/// \brief Flags common to every chapter's program.
struct CommonOptions {
  std::string model = "stories15m";     ///< preset name, llama2.c .bin path, or safetensors folder
  std::string tokenizer;                ///< tokenizer file or folder (default: the model folder's)
  std::string prompt;                   ///< text prompt (needs a tokenizer)
  std::string chat;                     ///< a message, wrapped in the model's chat format
  std::string system;                   ///< the system message of --chat
  std::string chat_format;              ///< --chat's format by name (default: from the model)
  std::string prompt_ids;               ///< comma-separated token ids
  std::string prompts_file;             ///< one prompt per line (ids, or text with a tokenizer)
  std::string workload_file;            ///< JSONL requests with lengths and arrivals (workload.hpp)
  int num_seqs = 1;                     ///< copies of the prompt to serve
  int max_new_tokens = 64;              ///< generation stops after this many tokens
  float temperature = 0.0f;             ///< 0 = greedy
  float top_p = 0.9f;                   ///< nucleus mass, used when temperature > 0
  std::uint64_t seed = 42;              ///< sampler seed
  std::uint64_t model_seed = 1;         ///< seed of synthetic weights for presets
  std::string device = "cpu";           ///< cpu or cuda (auto where a chapter allows it)
  std::string weight_dtype = "fp32";    ///< weights as the forward pass reads them
  std::string bf16_products = "widen";  ///< how the CPU multiplies bf16 weights: widen or pairs
  std::string kv_dtype = "fp32";        ///< KV storage type: fp32, fp16, bf16
  double kv_budget_mb = 0.0;            ///< 0 = the chapter's default (kv_budget_bytes)
  int threads = 0;                      ///< 0 = all cores
  bool json = false;                    ///< print one JSON object instead of the report
  bool ignore_eos = false;              ///< generate exactly max_new_tokens
  bool no_peak = false;                 ///< skip measuring the bandwidth peak at start
  bool top2_gaps = false;               ///< record each generated token's top-2 logit gap
};

/// \brief Registers the shared flags on `cli`; `num_seqs_help` says what --num-seqs counts in
/// this program. `--prompts` and `--workload` exclude --num-seqs, --prompt, --prompt-ids and each
/// other: flags that would be silently ignored together are refused together.
void add_common_options(
    CommandLine& cli, CommonOptions& o,
    const std::string& num_seqs_help = "Requests to serve (copies of the prompt)");

/// \brief Parses argv and runs `body`, turning every failure into one line on stderr and an exit
/// code: 0 success (or --help), 2 usage errors (unknown flag, malformed number, bad value),
/// 1 input or resource errors (bad file, exhausted budget, no device).
int run_cli(CommandLine& cli, int argc, char** argv, const std::function<void()>& body);

}  // namespace kvheap
