#include "common/program/cli.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <omp.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <string_view>
#include <system_error>
#include <utility>

#include "base/error.hpp"
#include "common/model/model_loader.hpp"
#include "common/tokenizer/chat_format.hpp"
#include "common/program/token_ids.hpp"
#include "common/tokenizer/tokenizer.hpp"
#include "common/tokenizer/tokenizer_files.hpp"

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

/// CLI11's message for a parse error, in the words of the rest of kvheap's where CLI11's own do
/// not say what to do: a flag given twice.
std::string usage_message(const std::string& what) {
  // "--max-new-tokens: At Most 1 required but received 2"
  const std::string marker = ": At Most 1 required but received ";
  const std::size_t at = what.find(marker);
  if (at != std::string::npos && what.rfind("--", 0) == 0)
    return fmt::format("{} is given {} times; give it once", what.substr(0, at),
                       what.substr(at + marker.size()));
  return what;
}

}  // namespace

Flag& Flag::show_default() {
  option_->capture_default_str();
  return *this;
}

Flag& Flag::excludes(const Flag& other) {
  option_->excludes(other.option_);
  return *this;
}

Flag& Flag::needs(const Flag& other) {
  option_->needs(other.option_);
  return *this;
}

Flag& Flag::not_empty(const std::string& expected) {
  option_->check(kvheap::not_empty(false, "value", expected));
  return *this;
}

bool Flag::given() const { return option_->count() > 0; }

CommandLine::CommandLine(const std::string& description, const std::string& program)
    : app_(std::make_unique<CLI::App>(description, program)) {}

CommandLine::~CommandLine() = default;

// A number's text is checked before CLI11 converts it (see number_text).
template <FlagValue T>
Flag CommandLine::option(const std::string& name, T& value, const std::string& help) {
  CLI::Option* option = app_->add_option(name, value, help);
  if constexpr (std::is_arithmetic_v<T>) option->check(number_text(std::is_unsigned_v<T>));
  return Flag(option);
}
template Flag CommandLine::option(const std::string&, std::string&, const std::string&);
template Flag CommandLine::option(const std::string&, int&, const std::string&);
template Flag CommandLine::option(const std::string&, long&, const std::string&);
template Flag CommandLine::option(const std::string&, std::uint64_t&, const std::string&);
template Flag CommandLine::option(const std::string&, float&, const std::string&);
template Flag CommandLine::option(const std::string&, double&, const std::string&);

Flag CommandLine::flag(const std::string& name, bool& value, const std::string& help) {
  return Flag(app_->add_flag(name, value, help));
}

Flag CommandLine::get(const std::string& name) {
  CLI::Option* option = app_->get_option_no_throw(name);
  if (option == nullptr) throw std::logic_error("no flag " + name + " is registered");
  return Flag(option);
}

void CommandLine::parse(int argc, const char* const* argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
}

void add_common_options(CommandLine& cli, CommonOptions& o, const std::string& num_seqs_help) {
  cli.option("--model", o.model,
             "Preset name (synthetic weights), fetched model (smollm2: scripts/fetch-model.sh), "
             "llama2.c .bin file, GGUF file, or safetensors folder")
      .show_default();
  // Empty values are refused (see empty_value); for --prompt-ids the BOS-only default would
  // otherwise stand in for an explicitly empty list.
  cli.option("--tokenizer", o.tokenizer,
             "Tokenizer for --prompt and text output: a tokenizer.json, a tiktoken file, a "
             "llama2.c tokenizer.bin, a GGUF file, or a model folder (default: the --model "
             "folder's or GGUF file's own)")
      .cli11()
      ->check(not_empty(false, "value", "a tokenizer file or folder"));
  cli.option("--prompt", o.prompt, "Prompt text (needs a tokenizer)")
      .cli11()
      ->check(not_empty(false, "value", "some prompt text"));
  Flag chat = cli.option("--chat", o.chat,
                         "A message, wrapped in the model family's chat format "
                         "(docs/pages/chat_formats.md); generation stops at the end of the turn");
  chat.cli11()->check(not_empty(false, "value", "a chat message"));
  chat.excludes(cli.get("--prompt"));
  cli.option("--system", o.system, "System message of --chat").needs(chat);
  cli.option("--chat-format", o.chat_format,
             "Chat format of --chat: llama3, qwen2, qwen3, mistral or chatml (default: from the "
             "model folder's config.json and tokenizer, or a GGUF file's chat template)")
      .needs(chat);
  cli.option("--prompt-ids", o.prompt_ids, "Prompt as comma-separated token ids, e.g. 1,403,407")
      .excludes(chat)
      .cli11()
      ->check(not_empty(true, "list", "comma-separated token ids like 1,2,3", "IDS"));
  cli.option("--max-new-tokens", o.max_new_tokens, "Tokens to generate at most").show_default();
  cli.option("--temperature", o.temperature, "Sampling temperature; 0 = greedy").show_default();
  cli.option("--top-p", o.top_p, "Nucleus sampling mass in (0, 1]").show_default();
  cli.option("--seed", o.seed, "Sampler seed").show_default();
  cli.option("--model-seed", o.model_seed, "Seed of synthetic weights for preset models")
      .show_default();
  cli.option("--num-seqs", o.num_seqs, num_seqs_help).show_default();
  cli.option("--prompts", o.prompts_file,
             "File with one prompt per line (ids, or text with --tokenizer)")
      .excludes(cli.get("--num-seqs"))
      .excludes(cli.get("--prompt"))
      .excludes(cli.get("--prompt-ids"))
      .excludes(cli.get("--chat"));
  cli.option("--workload", o.workload_file,
             "JSONL file of requests: prompt, max_new_tokens, stop_ids, arrival (see "
             "common/program/workload.hpp; scripts/make_workload.py writes them)")
      .excludes(cli.get("--num-seqs"))
      .excludes(cli.get("--prompt"))
      .excludes(cli.get("--prompt-ids"))
      .excludes(cli.get("--chat"))
      .excludes(cli.get("--prompts"));
  cli.option("--device", o.device,
             "Where to run: cpu or cuda; in chapter 2 also auto, its default: cuda when a GPU "
             "is found, else cpu")
      .show_default();
  cli.option("--weight-dtype", o.weight_dtype, "Weights on the device: fp32, fp16 or bf16")
      .show_default();
  cli.option("--kv-dtype", o.kv_dtype, "KV cache element type: fp32, fp16 or bf16").show_default();
  cli.option("--kv-budget-mb", o.kv_budget_mb,
             "Cap on KV cache memory in MB; 0 = the chapter's own: no cap in chapter 1, which "
             "reserves as "
             "requests arrive; max_seq_len for every request in chapters 2-5")
      .show_default();
  cli.option("--threads", o.threads, "CPU threads; 0 = all cores").show_default();
  cli.flag("--json", o.json, "Print one JSON object instead of the report");
  cli.flag("--ignore-eos", o.ignore_eos, "Do not stop at stop tokens (fixed-length runs)");
  cli.flag("--no-peak", o.no_peak, "Skip measuring the bandwidth peak at start");
  cli.flag("--top2-gaps", o.top2_gaps,
           "Record each generated token's top-2 logit gap (JSON: top2_gaps), to tell near ties "
           "from real differences; every pass then computes its logits");
}

int run_cli(CommandLine& cli, int argc, char** argv, const std::function<void()>& body) {
  CLI::App& app = *cli.app_;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": " << usage_message(e.what())
              << " (run with --help for usage)\n";
    return 2;
  }
  try {
    body();
    // Output that never reached stdout (a full disk, --json > /dev/full) is a failure, not a
    // success: flush it here, while the error can still be told.
    // errno is kept from the failed write itself (it may have happened mid-run, when stdio's
    // buffer filled), so it is not cleared here.
    std::cout.flush();
    if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
      const int error = errno;
      std::cerr << app.get_name() << ": cannot write the output to stdout: "
                << std::strerror(error != 0 ? error : EIO) << "\n";
      return 1;
    }
    return 0;
  } catch (const UsageError& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n";
    return 1;
  } catch (const std::system_error& e) {  // fmt::print to a stdout that failed mid-run
    std::cerr << app.get_name() << ": cannot write the output: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << app.get_name() << ": out of host memory; try a smaller model or KV budget\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << app.get_name() << ": internal error: " << e.what() << "\n";
    return 1;
  }
}

std::unique_ptr<Tokenizer> load_tokenizer(const CommonOptions& o, const ModelConfig& c) {
  if (!o.tokenizer.empty()) return load_tokenizer_file(o.tokenizer, c.vocab_size);
  return model_folder_tokenizer(o.model, c.vocab_size);
}

namespace {
ChatSetup chat_setup_of(const CommonOptions& o, const Tokenizer& tok) {
  return o.chat_format.empty() ? detect_chat_setup(o.model, tok)
                               : ChatSetup{parse_chat_format(o.chat_format), ""};
}
}  // namespace

std::vector<int> chat_stop_ids(const CommonOptions& o, const Tokenizer* tok) {
  if (o.chat.empty() || tok == nullptr) return {};
  return {chat_end_of_turn(chat_setup_of(o, *tok).format, *tok)};
}

std::vector<int> resolve_prompt(const CommonOptions& o, const ModelConfig& c,
                                const Tokenizer* tok) {
  if ((!o.prompt.empty()) + (!o.prompt_ids.empty()) + (!o.chat.empty()) > 1)
    throw UsageError("give one of --prompt, --prompt-ids and --chat, not two");
  if (!o.prompt_ids.empty()) return parse_token_ids(o.prompt_ids, c.vocab_size);
  if (!o.prompt.empty() || !o.chat.empty()) {
    if (tok == nullptr)
      throw UsageError(fmt::format(
          "{} needs a tokenizer: --tokenizer (a tokenizer.json, tiktoken file or llama2.c "
          "tokenizer.bin) or a --model folder that ships one; or give token ids with --prompt-ids",
          o.prompt.empty() ? "--chat" : "--prompt"));
    if (!o.prompt.empty()) return tok->encode(o.prompt, /*add_bos=*/true);
    const ChatSetup setup = chat_setup_of(o, *tok);
    (void)chat_end_of_turn(setup.format, *tok);  // the tokenizer has the format's special tokens
    // The format writes its own BOS, as apply_chat_template's text does.
    return tok->encode(
        chat_prompt(setup.format, o.system.empty() ? setup.default_system : o.system, o.chat),
        /*add_bos=*/false);
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
    throw UsageError(fmt::format(
        "--kv-budget-mb must be a number of MB from 0 (the default) to 1e12, got {}", mb));
  const auto bytes = static_cast<std::size_t>(mb * 1e6);
  if (mb > 0.0 && bytes == 0)  // would read as 0 = no cap: the opposite of what was asked
    throw UsageError(
        fmt::format("--kv-budget-mb {} is less than one byte; give 0 for the default", mb));
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

ModelConfig model_config_of(const std::string& model) {
  return is_preset(model) ? preset(model) : load_model(resolve_model_name(model)).config;
}

}  // namespace kvheap
