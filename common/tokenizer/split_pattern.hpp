// SplitPattern: a pre-tokenizer's split regex (GPT-2, Llama 3, Qwen), compiled by PCRE2 with
// Unicode properties, cutting text into the pieces that BPE then merges within.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvheap {

/// \brief A compiled split regex. Splitting keeps every byte: each match is a piece, and so is
/// each run of text between matches (Hugging Face's "Isolated" behaviour).
class SplitPattern {
 public:
  /// \brief The GPT-2 pattern, which a ByteLevel pre-tokenizer with use_regex applies.
  static constexpr std::string_view kGpt2 =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  /// \brief Llama 3's pattern (its tiktoken definition and tokenizer.json).
  static constexpr std::string_view kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

  /// \brief Compiles `pattern` (the regex syntax of Oniguruma and Rust's fancy-regex, which the
  /// reference libraries use; PCRE2 reads the same patterns). `where` names the file and field
  /// for messages. Throws InputError with PCRE2's reason and the offset when it does not compile.
  SplitPattern(std::string_view pattern, std::string where);
  ~SplitPattern();
  SplitPattern(const SplitPattern&) = delete;
  SplitPattern& operator=(const SplitPattern&) = delete;
  SplitPattern(SplitPattern&&) = delete;
  SplitPattern& operator=(SplitPattern&&) = delete;

  /// \brief Appends the pieces of `text` (well-formed UTF-8) to `out`; empty pieces are left out.
  /// Throws InputError when PCRE2 gives up on the text (its match limits).
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  /// \brief The pattern as written in the file.
  [[nodiscard]] const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::string where_;
  void* code_ = nullptr;  // pcre2_code_8*, kept out of this header so pcre2.h stays in one file
};

}  // namespace kvheap
