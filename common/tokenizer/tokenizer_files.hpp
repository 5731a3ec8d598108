// Finding and reading a tokenizer: a llama2.c tokenizer.bin, a Hugging Face tokenizer.json, a
// tiktoken file, or a model folder holding one of the last two.
#pragma once

#include <memory>
#include <string>

#include "common/tokenizer/tokenizer.hpp"

namespace kvheap {

/// \brief The tokenizer file of model folder `dir`: tokenizer.json, else a tiktoken
/// original/tokenizer.model or tokenizer.model (Llama 3's layout), else "" when there is none.
/// Throws InputError when the only candidate is a SentencePiece tokenizer.model, which kvheap
/// does not read (it reads the tokenizer.json that such folders also ship).
[[nodiscard]] std::string find_tokenizer_file(const std::string& dir);

/// \brief Reads `path` for a model whose embedding has `model_rows` rows (its vocab_size): a
/// folder is searched with find_tokenizer_file; a file is read by its content, as a GGUF file's
/// tokenizer (the GGUF magic), a tokenizer.json (a JSON object), a tiktoken file (base64 and a
/// rank on the first line) or else a llama2.c tokenizer.bin (which must hold exactly
/// `model_rows` tokens, as before).
///
/// Throws InputError for a path that is not a regular file or folder, a folder without a
/// tokenizer, a malformed file, a tokenizer that can produce an id at or past `model_rows`, and one
/// with 1024 or more fewer ids than rows, or an eighth of the rows fewer: that is another model's
/// tokenizer. A smaller gap is padding, which Qwen checkpoints ship.
[[nodiscard]] std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path,
                                                             int model_rows);

/// \brief The tokenizer a model folder ships, or a GGUF model file carries, for a run without
/// --tokenizer: nullptr when `model` is neither or holds no tokenizer. Throws as
/// load_tokenizer_file.
[[nodiscard]] std::unique_ptr<Tokenizer> model_folder_tokenizer(const std::string& model,
                                                                int model_rows);

}  // namespace kvheap
