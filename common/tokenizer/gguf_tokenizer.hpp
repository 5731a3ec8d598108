// The tokenizer a GGUF file carries in its metadata, as a BpeTokenizer.
//
// `tokenizer.ggml.model` says which kind:
//   - gpt2: byte-level BPE. The vocabulary and merges are written in GPT-2's printable byte
//     alphabet; `tokenizer.ggml.pre` names the split rules, which llama.cpp keeps in code, not in
//     the file: default and gpt2 (GPT-2's pattern), llama-bpe / llama3 (Llama 3's, with whole-word
//     lookup before merging), qwen2 (Qwen's: single digits) and smollm (single digits, then
//     GPT-2's pattern).
//   - llama: SentencePiece BPE. Pieces with "▁" for spaces, merged by score (the adjacent pair
//     whose merged piece scores highest first), <0xNN> tokens for bytes no piece covers.
// Control, user-defined and unknown tokens (token_type 3, 4 and 2) are matched in the text first
// and become their ids; control ones print as nothing. `add_bos_token` and `add_eos_token` say
// whether encode(add_bos = true) puts BOS first and EOS last.
#pragma once

#include <memory>
#include <string>

#include "common/tokenizer/bpe_tokenizer.hpp"
#include "common/model/gguf_file.hpp"

namespace kvheap {

/// \brief The BpeParts of `file`'s tokenizer. Throws InputError naming the file and key for a
/// missing vocabulary, a tokenizer model or pre-tokenizer kvheap does not know (named, with the
/// ones it does), token arrays of different lengths, a merge that names a token the vocabulary
/// lacks, and a BOS or EOS id outside the vocabulary.
[[nodiscard]] BpeParts gguf_tokenizer_parts(const GgufFile& file);

/// \brief The tokenizer of the GGUF file at `path`.
[[nodiscard]] std::unique_ptr<BpeTokenizer> load_gguf_tokenizer(const std::string& path);

}  // namespace kvheap
