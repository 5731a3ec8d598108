// Helpers for the fuzz entry points: a per-process scratch folder for loaders that only take a
// path, splitting an input into parts, the built-in vocabulary, and the oracle check.
#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/llama2c_tokenizer.hpp"
#include "fuzz/entry_points.hpp"

namespace kvheap::fuzz {

/// \brief A folder private to this process, in /dev/shm when it exists (no disk writes at tens of
/// thousands of inputs per second), else in the system temp folder. Created on first use and
/// removed when the process exits normally.
const std::filesystem::path& scratch_dir();

/// \brief Writes `bytes` to `name` inside scratch_dir(), replacing it; returns the full path.
std::string write_scratch(const std::string& name, std::string_view bytes);

/// \brief Removes `name` from scratch_dir() if it is there.
void remove_scratch(const std::string& name);

/// \brief The input as a string_view over the same bytes.
[[nodiscard]] std::string_view as_text(std::span<const std::uint8_t> input);

/// \brief `text` cut at every kFuzzPartSeparator; one part when there is none.
[[nodiscard]] std::vector<std::string_view> split_parts(std::string_view text);

/// \brief The bytes of a small llama2.c tokenizer.bin: <unk>, BOS, EOS, the 256 byte tokens
/// <0x00>..<0xFF>, then single characters and merges of a few English words (some with equal
/// scores, to exercise tie-breaking). The fuzz seed generator writes the same layout.
[[nodiscard]] std::string builtin_vocab_bytes();

/// \brief The built-in vocabulary, loaded once through Llama2cTokenizer::load.
const Llama2cTokenizer& builtin_tokenizer();

/// \brief llama2.c's original encoder: rescan every adjacent pair after each merge and merge the
/// leftmost best. O(n^2); the oracle for kvheap's heap-based encoder on short texts.
[[nodiscard]] std::vector<int> reference_encode(const Llama2cTokenizer& t, std::string_view text,
                                                bool add_bos);

/// \brief Records `e`'s message in `why` (when not null) and returns FuzzOutcome::Rejected.
FuzzOutcome rejected(const std::exception& e, std::string* why);

/// \brief Throws std::logic_error with `what` when `ok` is false: an oracle found a kvheap bug.
/// Not a kvheap::Error, so the entry points let it escape as a finding.
void require(bool ok, const std::string& what);

}  // namespace kvheap::fuzz
