// The committed tokenizer test data (tests/data/tokenizers/, written by
// scripts/make_tokenizer_testdata.py): paths, the reference ids, and the tokenizers they belong to.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/tokenizer/bpe_tokenizer.hpp"

namespace kvheap::test {

/// \brief tests/data/tokenizers/`name`.
[[nodiscard]] std::string tokenizer_data(const std::string& name);

/// \brief reference.json, parsed once.
[[nodiscard]] const nlohmann::json& tokenizer_reference();

/// \brief The text of a case in reference.json (its bytes, stored as hex).
[[nodiscard]] std::string reference_case_text(const std::string& name);

/// \brief The tokenizer.json text of reference tokenizer `name`: "qwen2" and "mistral" are the
/// committed files; "llama3", "gpt2" and "metaspace" are a base file with an overlay applied
/// (the overlay's top-level keys replace the base's, its "model" keys replace the model's).
[[nodiscard]] std::string reference_tokenizer_json(const std::string& name);

/// \brief reference_tokenizer_json(`name`) read into a tokenizer, or, for "llama3_tiktoken",
/// qwen16k.tiktoken read as a Llama 3 tiktoken file.
[[nodiscard]] std::unique_ptr<BpeTokenizer> reference_tokenizer(const std::string& name);

}  // namespace kvheap::test
