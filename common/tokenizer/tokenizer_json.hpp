// Reading a Hugging Face tokenizer.json into a BpeTokenizer: the byte-level BPE of GPT-2, Llama 3
// and Qwen, and the SentencePiece-style BPE (the "▁" marker, byte fallback) of Llama 2, Mistral
// and TinyLlama.
//
// Read: model (BPE: vocab, merges as "a b" strings or pairs, byte_fallback, ignore_merges,
// unk_token, fuse_unk), added_tokens, normalizer (NFC, Prepend, Replace, Sequence),
// pre_tokenizer (Split with a regex and the Isolated behaviour, ByteLevel, Metaspace, Sequence),
// post_processor (TemplateProcessing with a BOS before the text, ByteLevel, Sequence) and decoder
// (ByteLevel; Replace, ByteFallback, Fuse and Strip; Metaspace). Anything else is refused with the
// field named rather than read as something it is not.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/tokenizer/bpe_tokenizer.hpp"

namespace kvheap {

/// \brief The BpeParts of tokenizer.json text `text`; `path` names the file in messages. Throws
/// InputError naming the file and the field for invalid JSON, a model type other than BPE, a
/// merge naming a token the vocabulary lacks, two tokens with one id, a regex that does not
/// compile, and every setting kvheap does not implement.
[[nodiscard]] BpeParts parse_tokenizer_json(std::string_view text, const std::string& path);

/// \brief Reads the tokenizer.json at `path` (a regular file of at most 256 MiB) into a
/// tokenizer; throws InputError as parse_tokenizer_json and the file checks do.
[[nodiscard]] std::unique_ptr<BpeTokenizer> load_tokenizer_json(const std::string& path);

/// \brief GPT-2's table from a byte to the printable character a byte-level vocabulary writes
/// for it ("Ġ" for a space), indexed by byte.
[[nodiscard]] const std::array<char32_t, 256>& byte_level_alphabet();

/// \brief The raw bytes of a byte-level vocabulary's token text ("Ġthe" -> " the"), or nullopt
/// with `why` set when the text is not UTF-8 or has a character outside the alphabet.
[[nodiscard]] std::optional<std::string> bytes_of_byte_level(std::string_view token,
                                                             std::string* why);

}  // namespace kvheap
