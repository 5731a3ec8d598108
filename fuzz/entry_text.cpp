// Fuzz entry points for text-shaped input: the tokenizer (its file format and its encoder), the
// shared command line and the workload format. Also the table of targets and the libFuzzer-shaped
// wrappers.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "common/program/cli.hpp"
#include "common/program/options.hpp"
#include "common/serving/sampler.hpp"
#include "common/serving/serve.hpp"
#include "common/tokenizer/llama2c_tokenizer.hpp"
#include "common/program/workload.hpp"
#include "fuzz/entry_points.hpp"
#include "fuzz/fuzz_support.hpp"

namespace kvheap {

namespace {

using fuzz::require;

// The quadratic reference encoder is the oracle only up to this many bytes of text, so that long
// inputs still run at thousands per second.
constexpr std::size_t kReferenceEncodeMaxBytes = 128;

void check_ids_in_range(const std::vector<int>& ids, int vocab_size) {
  for (const int id : ids)
    require(id >= 0 && id < vocab_size, "encode produced token id " + std::to_string(id) +
                                            " outside a vocabulary of " +
                                            std::to_string(vocab_size));
}

// Whole tokenizer.bin records after the 4-byte header, plus one when bytes are left over that do
// not form a record, so that the loader is asked to read into the damage rather than stop short.
int count_records(std::string_view file) {
  if (file.size() < 4) return 0;
  std::size_t pos = 4;
  int n = 0;
  while (file.size() - pos >= 8) {
    std::int32_t len;
    std::memcpy(&len, file.data() + pos + 4, 4);
    if (len < 0 || static_cast<std::size_t>(len) > file.size() - pos - 8) break;
    pos += 8 + static_cast<std::size_t>(len);
    ++n;
  }
  return pos == file.size() ? n : n + 1;
}

// The small model fuzz_cli resolves prompts against: the tiny preset (96 positions, enough for
// the default --max-new-tokens) with the built-in vocabulary.
ModelConfig cli_config() {
  ModelConfig c = preset("tiny");
  c.vocab_size = fuzz::builtin_tokenizer().vocab_size();
  return c;
}

}  // namespace

FuzzOutcome fuzz_tokenizer(std::span<const std::uint8_t> input, std::string* why) {
  const std::string_view text = fuzz::as_text(input);
  const bool add_bos = input.size() % 2 == 1;

  // Any bytes at all encode with a vocabulary that has every byte token, and decode back exactly.
  const Llama2cTokenizer& builtin = fuzz::builtin_tokenizer();
  const std::vector<int> ids = builtin.encode(text, add_bos);
  check_ids_in_range(ids, builtin.vocab_size());
  require(builtin.decode(ids) == text, "decode(encode(text)) differs from text");
  if (text.size() <= kReferenceEncodeMaxBytes)
    require(ids == fuzz::reference_encode(builtin, text, add_bos),
            "encode disagrees with the llama2.c merge loop");

  const std::vector<std::string_view> parts = fuzz::split_parts(text);
  if (parts.size() < 2 || parts[0].empty()) return FuzzOutcome::Accepted;
  // Selector byte: load with exactly the records present, one fewer, or one more.
  const int delta = static_cast<unsigned char>(parts[0][0]) % 3 - 1;
  const std::string_view file = parts[0].substr(1);
  const std::string path = fuzz::write_scratch("tokenizer.bin", file);
  try {
    const int vocab = count_records(file) + delta;
    const Llama2cTokenizer t = Llama2cTokenizer::load(path, vocab);
    require(t.vocab_size() == vocab, "tokenizer loaded a different vocab_size than asked for");
    const std::vector<int> got = t.encode(parts[1], add_bos);
    check_ids_in_range(got, vocab);
    (void)t.decode(got);  // every id is valid, so this must not throw
    if (parts[1].size() <= kReferenceEncodeMaxBytes)
      require(got == fuzz::reference_encode(t, parts[1], add_bos),
              "encode disagrees with the llama2.c merge loop on a fuzzed vocabulary");
  } catch (const Error& e) {
    return fuzz::rejected(e, why);
  }
  return FuzzOutcome::Accepted;
}

FuzzOutcome fuzz_cli(std::span<const std::uint8_t> input, std::string* why) {
  // Newline-separated argv tokens. A real argv cannot hold NUL, so c_str() cuts there as the
  // kernel would.
  std::vector<std::string> tokens;
  const std::string_view text = fuzz::as_text(input);
  for (std::size_t start = 0; !text.empty() && start <= text.size();) {
    const std::size_t nl = std::min(text.find('\n', start), text.size());
    tokens.emplace_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  std::vector<const char*> argv = {"fuzz_cli"};
  for (const std::string& t : tokens) argv.push_back(t.c_str());

  CommandLine cli{"kvheap fuzz_cli", "fuzz_cli"};
  CommonOptions o;
  add_common_options(cli, o);
  try {
    cli.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const UsageError& e) {
    return fuzz::rejected(e, why);  // run_cli turns these into exit code 2 (or 0 for --help)
  }
  try {
    const ModelConfig c = cli_config();
    (void)parse_dtype(o.kv_dtype);
    // --threads changes process-wide OpenMP state; put it back so inputs stay independent.
    const int threads_before = omp_get_max_threads();
    (void)apply_threads(o);
    omp_set_num_threads(threads_before);
    // As the chapter programs do: the tokenizer exists only when --tokenizer was given.
    const Llama2cTokenizer* tok = o.tokenizer.empty() ? nullptr : &fuzz::builtin_tokenizer();
    const std::vector<int> prompt = resolve_prompt(o, c, tok);
    check_ids_in_range(prompt, c.vocab_size);
    check_generation_fits(prompt.size(), o.max_new_tokens, c);
    Sampler sampler(sampler_config(o));
    const float logits[] = {0.5f, 2.0f, -1.0f, 2.0f, -std::numeric_limits<float>::infinity()};
    const int next = sampler.sample(logits);
    require(next >= 0 && next < 4, "sampler picked a masked or out-of-range token");
  } catch (const Error& e) {
    return fuzz::rejected(e, why);
  }
  return FuzzOutcome::Accepted;
}

FuzzOutcome fuzz_workload(std::span<const std::uint8_t> input, std::string* why) {
  const ModelConfig c = cli_config();
  const Llama2cTokenizer& tok = fuzz::builtin_tokenizer();
  std::vector<Request> w;
  try {
    w = parse_workload(fuzz::as_text(input), "fuzz.jsonl", c, &tok, 8);
  } catch (const Error& e) {
    return fuzz::rejected(e, why);
  }
  // What it accepts, the serving loop can serve: ids in the vocabulary, generations inside the
  // context, arrivals of one kind that never decrease.
  for (std::size_t i = 0; i < w.size(); ++i) {
    const Request& r = w[i];
    require(!r.prompt.empty(), "accepted an empty prompt");
    check_ids_in_range(r.prompt, c.vocab_size);
    check_ids_in_range(r.stop_ids, c.vocab_size);
    require(positions_stored(r.prompt.size(), r.max_new_tokens) <= c.max_seq_len,
            "accepted a generation past the context");
    if (i > 0)
      require(
          r.arrival_seconds >= w[i - 1].arrival_seconds && r.arrival_step >= w[i - 1].arrival_step,
          "accepted arrivals that decrease");
  }
  // And what it writes reads back the same.
  std::string text;
  for (const Request& r : w) text += workload_line(r) + "\n";
  const std::vector<Request> back = parse_workload(text, "round trip", c, &tok, 8);
  require(back.size() == w.size(), "the written workload reads back a different count");
  for (std::size_t i = 0; i < w.size(); ++i)
    require(back[i].prompt == w[i].prompt && back[i].max_new_tokens == w[i].max_new_tokens &&
                back[i].stop_ids == w[i].stop_ids &&
                back[i].arrival_seconds == w[i].arrival_seconds &&
                back[i].arrival_step == w[i].arrival_step,
            "a written request reads back different");
  return FuzzOutcome::Accepted;
}

std::span<const FuzzTarget> fuzz_targets() {
  static constexpr FuzzTarget kTargets[] = {
      {"fuzz_llama2c_loader", fuzz_llama2c_loader}, {"fuzz_safetensors", fuzz_safetensors},
      {"fuzz_tokenizer", fuzz_tokenizer},           {"fuzz_cli", fuzz_cli},
      {"fuzz_block_pool", fuzz_block_pool},         {"fuzz_shared_blocks", fuzz_shared_blocks},
      {"fuzz_scheduler", fuzz_scheduler},           {"fuzz_workload", fuzz_workload},
      {"fuzz_tokenizer_json", fuzz_tokenizer_json}, {"fuzz_tiktoken", fuzz_tiktoken},
      {"fuzz_bpe_encode", fuzz_bpe_encode},         {"fuzz_gguf", fuzz_gguf},
  };
  return kTargets;
}

int fuzz_llama2c_loader_one(const std::uint8_t* data, std::size_t size) {
  (void)fuzz_llama2c_loader({data, size}, nullptr);
  return 0;
}
int fuzz_safetensors_one(const std::uint8_t* data, std::size_t size) {
  (void)fuzz_safetensors({data, size}, nullptr);
  return 0;
}
int fuzz_gguf_one(const std::uint8_t* data, std::size_t size) {
  (void)fuzz_gguf({data, size}, nullptr);
  return 0;
}
int fuzz_tokenizer_one(const std::uint8_t* data, std::size_t size) {
  (void)fuzz_tokenizer({data, size}, nullptr);
  return 0;
}
int fuzz_cli_one(const std::uint8_t* data, std::size_t size) {
  (void)fuzz_cli({data, size}, nullptr);
  return 0;
}
int fuzz_workload_one(const std::uint8_t* data, std::size_t size) {
  (void)fuzz_workload({data, size}, nullptr);
  return 0;
}

}  // namespace kvheap
