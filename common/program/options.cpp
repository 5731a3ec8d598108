#include "common/program/options.hpp"

#include <fmt/format.h>
#include <omp.h>

#include "base/error.hpp"
#include "common/model/model_loader.hpp"
#include "common/program/token_ids.hpp"
#include "common/tokenizer/chat_format.hpp"
#include "common/tokenizer/tokenizer.hpp"
#include "common/tokenizer/tokenizer_files.hpp"

namespace kvheap {

std::unique_ptr<Tokenizer> load_tokenizer(const CommonOptions& o, const ModelConfig& c) {
  if (!o.tokenizer.empty()) return load_tokenizer_file(o.tokenizer, c.vocab_size);
  return model_folder_tokenizer(o.model, c.vocab_size);
}

namespace {

// Oversubscription --threads allows. Generous on purpose: the limit exists to turn a request the
// OS cannot satisfy into a message, not to tune anyone's runs.
constexpr int kMaxThreadsPerCore = 16;

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
