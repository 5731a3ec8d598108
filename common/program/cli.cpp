#include "common/program/cli.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

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

namespace kvheap {

namespace {

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
  cli.option("--weight-dtype", o.weight_dtype,
             "Weight matrices as the forward pass reads them: fp32, fp16 or bf16")
      .show_default();
  cli.option("--bf16-products", o.bf16_products,
             "How the CPU multiplies bf16 weights: widen (to fp32 in registers, on any CPU: the "
             "logits of fp32 products of the rounded weights) or pairs (AVX512-BF16's "
             "vdpbf16ps, the activations rounded to bf16 too; a build for a CPU that has it)")
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

}  // namespace kvheap
