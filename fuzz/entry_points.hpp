// The fuzz entry points: one function per target, shared by the libFuzzer programs in fuzz/ and
// by the regression test that replays the seed corpus and every crash found so far.
//
// Each function feeds one input through a piece of kvheap that reads untrusted bytes. A
// kvheap::Error (a malformed command line included: CommandLine::parse throws UsageError, which
// the programs turn into exit code 2) is the expected answer to a bad input and is swallowed;
// anything else escapes: another exception, a crash, a sanitizer report, a hang. Oracles that go
// beyond "did not crash" (a loaded checkpoint tiles its file exactly, decode(encode(text)) == text)
// throw std::logic_error, so they escape too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvheap {

/// \brief Separates the parts of a multi-part fuzz input (a safetensors folder, a tokenizer and
/// its text). Inputs are split at its occurrences, left to right.
inline constexpr std::string_view kFuzzPartSeparator = "\n--kvheap-part--\n";

/// \brief What kvheap made of one fuzz input.
enum class FuzzOutcome {
  Accepted,  ///< the input was valid and every oracle held
  Rejected,  ///< kvheap refused it with its own error type (the expected answer to bad input)
};

/// \brief One fuzz target: its program name (fuzz_<what>, also the corpus folder's name) and the
/// function that runs one input through it.
struct FuzzTarget {
  const char* name;  ///< e.g. "fuzz_llama2c_loader"
  /// Runs one input; throws on a finding. When rejected and `why` is not null, stores kvheap's
  /// message there.
  FuzzOutcome (*run)(std::span<const std::uint8_t> input, std::string* why);
};

/// \brief Every fuzz target, in a fixed order.
[[nodiscard]] std::span<const FuzzTarget> fuzz_targets();

/// \brief Input: the bytes of a llama2.c checkpoint (version 0 or 1). Loads it through a scratch
/// file and checks that the tensors tile the file exactly.
FuzzOutcome fuzz_llama2c_loader(std::span<const std::uint8_t> input, std::string* why = nullptr);

/// \brief Input: config.json, separator, model.safetensors[, separator,
/// model.safetensors.index.json]; without a separator the whole input is model.safetensors next
/// to a fixed, valid config.json of a tiny model.
FuzzOutcome fuzz_safetensors(std::span<const std::uint8_t> input, std::string* why = nullptr);

/// \brief Input: the bytes of a GGUF file. Parses it (every tensor's data must lie in the
/// input); builds and runs its tokenizer when it has one (ids in range); loads it as a model
/// when it names an architecture (every tensor present).
FuzzOutcome fuzz_gguf(std::span<const std::uint8_t> input, std::string* why = nullptr);

/// \brief Input: the whole input is encoded and decoded with a small built-in vocabulary (the
/// round trip must be exact). When it holds a separator, the part before it is one selector byte
/// plus a tokenizer.bin, loaded with a vocab_size derived from its record count, and the part
/// after it is text to encode and decode with that vocabulary.
FuzzOutcome fuzz_tokenizer(std::span<const std::uint8_t> input, std::string* why = nullptr);

/// \brief Input: command-line tokens separated by newlines, parsed by a CommandLine (CLI11) built
/// with add_common_options; then the prompt is resolved (--prompt-ids through parse_token_ids,
/// --prompt through the built-in vocabulary) against a small config and checked with the same
/// functions the chapter programs use. No model is run.
FuzzOutcome fuzz_cli(std::span<const std::uint8_t> input, std::string* why = nullptr);

/// \brief Input: a pool shape and a program of admit / append / free / misuse operations on
/// chapter 3's BlockManager, checked after every step (see fuzz/entry_block_pool.cpp).
FuzzOutcome fuzz_block_pool(std::span<const std::uint8_t> input, std::string* why = nullptr);

/// \brief libFuzzer-shaped wrapper of fuzz_block_pool; always returns 0.
int fuzz_block_pool_one(const std::uint8_t* data, std::size_t size);

/// \brief Input: a pool shape, then (operation, argument) byte pairs run against chapter 4's
/// SharedBlockManager (admit with prefix reuse, fork, append, free, batches, misuse), every
/// position read back through a storage stand-in after every step (see
/// fuzz/entry_shared_blocks.cpp).
FuzzOutcome fuzz_shared_blocks(std::span<const std::uint8_t> input, std::string* why = nullptr);
/// \brief libFuzzer-shaped wrapper of fuzz_shared_blocks; always returns 0.
int fuzz_shared_blocks_one(const std::uint8_t* data, std::size_t size);

/// \brief Input: a pool shape and scheduler limits, then (operation, argument) byte pairs that
/// submit requests and run steps of chapter 5's Scheduler (see entry_scheduler.cpp). Every batch
/// must fit, every request must read back its own tokens, and every block must come back.
FuzzOutcome fuzz_scheduler(std::span<const std::uint8_t> input, std::string* why = nullptr);
/// \brief libFuzzer-shaped wrapper of fuzz_scheduler; always returns 0.
int fuzz_scheduler_one(const std::uint8_t* data, std::size_t size);
/// \brief Input: a workload file (common/program/workload.hpp), read against a small config and the
/// built-in vocabulary. What it accepts must be servable (ids in range, generations inside the
/// context, arrivals that never decrease), and written back with workload_line it must read the
/// same.
FuzzOutcome fuzz_workload(std::span<const std::uint8_t> input, std::string* why = nullptr);
/// \brief libFuzzer-shaped wrapper of fuzz_workload; always returns 0.
int fuzz_workload_one(const std::uint8_t* data, std::size_t size);
/// \brief Input: a tokenizer.json[, separator, text]. The file is read into a tokenizer; the text
/// is encoded with it, decoded and streamed (the stream must print what decode prints), and a
/// byte-level file that changes nothing before splitting must give the text back.
FuzzOutcome fuzz_tokenizer_json(std::span<const std::uint8_t> input, std::string* why = nullptr);
/// \brief libFuzzer-shaped wrapper of fuzz_tokenizer_json; always returns 0.
int fuzz_tokenizer_json_one(const std::uint8_t* data, std::size_t size);
/// \brief Input: a tiktoken file[, separator, text], read with Llama 3's pattern and special
/// tokens. The text must decode back exactly, and on short texts without special tokens encode
/// as tiktoken's own merge loop, restated plainly, does.
FuzzOutcome fuzz_tiktoken(std::span<const std::uint8_t> input, std::string* why = nullptr);
/// \brief libFuzzer-shaped wrapper of fuzz_tiktoken; always returns 0.
int fuzz_tiktoken_one(const std::uint8_t* data, std::size_t size);
/// \brief Input: text, encoded with the committed real vocabularies (tests/data/tokenizers: Qwen's
/// tokenizer.json, its Llama 3 tiktoken form, Mistral's SentencePiece-style file). Ids must be in
/// range, streams must print what decode prints, invalid UTF-8 must encode as its U+FFFD
/// replacement, and the byte-level ones must give the (NFC) text back.
FuzzOutcome fuzz_bpe_encode(std::span<const std::uint8_t> input, std::string* why = nullptr);
/// \brief libFuzzer-shaped wrapper of fuzz_bpe_encode; always returns 0.
int fuzz_bpe_encode_one(const std::uint8_t* data, std::size_t size);
/// \brief libFuzzer-shaped wrapper of fuzz_llama2c_loader; always returns 0.
int fuzz_llama2c_loader_one(const std::uint8_t* data, std::size_t size);
/// \brief libFuzzer-shaped wrapper of fuzz_safetensors; always returns 0.
int fuzz_safetensors_one(const std::uint8_t* data, std::size_t size);
/// \brief libFuzzer-shaped wrapper of fuzz_gguf; always returns 0.
int fuzz_gguf_one(const std::uint8_t* data, std::size_t size);
/// \brief libFuzzer-shaped wrapper of fuzz_tokenizer; always returns 0.
int fuzz_tokenizer_one(const std::uint8_t* data, std::size_t size);
/// \brief libFuzzer-shaped wrapper of fuzz_cli; always returns 0.
int fuzz_cli_one(const std::uint8_t* data, std::size_t size);

}  // namespace kvheap
