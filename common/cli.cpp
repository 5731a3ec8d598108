#include "common/cli.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <charconv>
#include <cstdint>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "common/error.hpp"
#include "common/token_ids.hpp"
#include "common/tokenizer.hpp"

namespace kvheap {

namespace {

// Oversubscription --threads allows. Generous on purpose: the limit exists to turn a request the
// OS cannot satisfy into a message, not to tune anyone's runs.
constexpr int kMaxThreadsPerCore = 16;

// An empty value given on purpose (often an unset shell variable) would otherwise read as "not
// given", or as 0 for a number: a silent wrong answer. Returns the message for `text` when it is
// empty (or, with `blank`, only spaces and tabs), else "".
std::string empty_value(const std::string& text, bool blank, std::string_view what,
                        std::string_view expected) {
  const bool empty = blank ? text.find_first_not_of(" \t") == std::string::npos : text.empty();
  return empty ? fmt::format("the {} is empty; expected {}", what, expected) : std::string();
}

/// A validator that refuses an empty value (see empty_value); `name` is shown in --help.
CLI::Validator not_empty(bool blank, std::string what, std::string expected,
                         std::string name = "") {
  return CLI::Validator([=](std::string& text) { return empty_value(text, blank, what, expected); },
                        std::move(name));
}

// CLI11 reads an empty value as 0 and wraps "-1" to 2^64 - 1 (or saturates an overflowing value
// there) for unsigned options: silent wrong answers. So every number is checked as text first.
CLI::Validator number_text(bool is_unsigned) {
  return CLI::Validator(
      [is_unsigned](std::string& text) -> std::string {
        std::string error = empty_value(text, true, "value", "a number");
        if (!error.empty() || !is_unsigned) return error;
        const std::size_t first = text.find_first_not_of(" \t");
        if (text[first] == '-') return fmt::format("expected a number >= 0, got {}", text);
        unsigned long long value = 0;
        const auto [end, ec] =
            std::from_chars(text.data() + first, text.data() + text.size(), value);
        if (ec == std::errc::result_out_of_range)
          return fmt::format("{} is too large; expected at most {}", text,
                             std::numeric_limits<std::uint64_t>::max());
        return "";
      },
      "");
}

}  // namespace

void add_common_options(CLI::App& app, CommonOptions& o) {
  app.add_option("--model", o.model,
                 "Preset name (synthetic weights), llama2.c .bin file, or safetensors folder")
      ->capture_default_str();
  // Empty values are refused (see empty_value); for --prompt-ids the BOS-only default would
  // otherwise stand in for an explicitly empty list.
  app.add_option("--tokenizer", o.tokenizer, "llama2.c tokenizer.bin for --prompt and text output")
      ->check(not_empty(false, "value", "a tokenizer.bin path"));
  app.add_option("--prompt", o.prompt, "Prompt text (needs --tokenizer)")
      ->check(not_empty(false, "value", "some prompt text"));
  app.add_option("--prompt-ids", o.prompt_ids,
                 "Prompt as comma-separated token ids, e.g. 1,403,407")
      ->check(not_empty(true, "list", "comma-separated token ids like 1,2,3", "IDS"));
  app.add_option("--max-new-tokens", o.max_new_tokens, "Tokens to generate at most")
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str();
  app.add_option("--top-p", o.top_p, "Nucleus sampling mass in (0, 1]")->capture_default_str();
  app.add_option("--seed", o.seed, "Sampler seed")->capture_default_str();
  app.add_option("--model-seed", o.model_seed, "Seed of synthetic weights for preset models")
      ->capture_default_str();
  app.add_option("--device", o.device, "Where to run: cpu or cuda")->capture_default_str();
  app.add_option("--kv-dtype", o.kv_dtype, "KV cache element type: fp32, fp16 or bf16")
      ->capture_default_str();
  app.add_option("--kv-budget-mb", o.kv_budget_mb, "Cap on KV cache memory in MB; 0 = no cap")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "CPU threads; 0 = all cores")->capture_default_str();
  app.add_flag("--json", o.json, "Print one JSON object instead of the report");
  app.add_flag("--ignore-eos", o.ignore_eos, "Do not stop at stop tokens (fixed-length runs)");
}

int run_cli(CLI::App& app, int argc, char** argv, const std::function<void()>& body) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (type == "INT" || type == "UINT" || type == "FLOAT") opt->check(number_text(type == "UINT"));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": " << e.what() << " (run with --help for usage)\n";
    return 2;
  }
  try {
    body();
    return 0;
  } catch (const UsageError& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << app.get_name() << ": out of host memory; try a smaller model or --kv-budget-mb\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << app.get_name() << ": internal error: " << e.what() << "\n";
    return 1;
  }
}

std::unique_ptr<Tokenizer> load_tokenizer(const CommonOptions& o, const ModelConfig& c) {
  if (o.tokenizer.empty()) return nullptr;
  return std::make_unique<Tokenizer>(Tokenizer::load(o.tokenizer, c.vocab_size));
}

std::vector<int> resolve_prompt(const CommonOptions& o, const ModelConfig& c,
                                const Tokenizer* tok) {
  if (!o.prompt.empty() && !o.prompt_ids.empty())
    throw UsageError("give either --prompt or --prompt-ids, not both");
  if (!o.prompt_ids.empty()) return parse_token_ids(o.prompt_ids, c.vocab_size);
  if (!o.prompt.empty()) {
    if (tok == nullptr)
      throw UsageError(
          "--prompt needs --tokenizer (a llama2.c tokenizer.bin), or give token ids "
          "with --prompt-ids");
    return tok->encode(o.prompt, /*add_bos=*/true);
  }
  return {c.bos_id};
}

SamplerConfig sampler_config(const CommonOptions& o) {
  SamplerConfig s;
  s.temperature = o.temperature;
  s.top_p = o.top_p;
  s.seed = o.seed;
  return s;
}

std::size_t kv_budget_bytes(const CommonOptions& o) {
  const double mb = o.kv_budget_mb;
  // Written so that NaN fails too; inf and huge values would be undefined in the conversion.
  if (!(mb >= 0.0 && mb <= 1e12))
    throw UsageError(
        fmt::format("--kv-budget-mb must be a number of MB from 0 (no cap) to 1e12, got {}", mb));
  const auto bytes = static_cast<std::size_t>(mb * 1e6);
  if (mb > 0.0 && bytes == 0)  // would read as 0 = no cap: the opposite of what was asked
    throw UsageError(fmt::format("--kv-budget-mb {} is less than one byte; give 0 for no cap", mb));
  return bytes;
}

int apply_threads(const CommonOptions& o) {
  if (o.threads < 0) throw UsageError(fmt::format("--threads must be >= 0, got {}", o.threads));
  // Past a few threads per core decoding only slows down, and far past it libgomp cannot create
  // the team at all: --threads 100000 crashed the program (SIGSEGV) instead of failing.
  const int cores = omp_get_num_procs();
  if (o.threads > kMaxThreadsPerCore * cores)
    throw UsageError(
        fmt::format("--threads {} is more than {} per core for the {} cores here; give "
                    "at most {}, or 0 for one per core",
                    o.threads, kMaxThreadsPerCore, cores, kMaxThreadsPerCore * cores));
  if (o.threads > 0) omp_set_num_threads(o.threads);
  return omp_get_max_threads();
}

}  // namespace kvheap
