// Reading a tiktoken file (Llama 3's original/tokenizer.model): one token per line, its bytes in
// base64 and its rank, "IQ== 0". The file holds only the mergeable tokens; the split pattern and
// the special tokens belong to the model family, and kvheap knows Llama 3's.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/bpe_tokenizer.hpp"

namespace kvheap {

/// \brief Llama 3's 256 special tokens, in id order after the mergeable ranks (as its
/// tokenizer.json lists them: <|begin_of_text|> first, <|eot_id|> tenth).
[[nodiscard]] const std::vector<std::string>& llama3_special_tokens();

/// \brief Whether `head`, the start of a file, looks like a tiktoken file: a first line of
/// base64, one space and a number.
[[nodiscard]] bool looks_like_tiktoken(std::string_view head);

/// \brief The BpeParts of tiktoken text `text` with Llama 3's pattern and special tokens: ranks
/// are ids, a token merges from any two tokens that make it up, at its own rank (tiktoken's
/// rule), and a piece that is a whole token stays one. `path` names the file in messages. Throws
/// InputError naming the line for a malformed line, bad base64, a rank out of range, a rank or a
/// token given twice, and for an empty file.
[[nodiscard]] BpeParts parse_tiktoken(std::string_view text, const std::string& path);

/// \brief Reads the tiktoken file at `path` (a regular file of at most 64 MiB) into a
/// tokenizer; throws InputError as parse_tiktoken and the file checks do.
[[nodiscard]] std::unique_ptr<BpeTokenizer> load_tiktoken(const std::string& path);

}  // namespace kvheap
