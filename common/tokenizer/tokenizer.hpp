// Tokenizer: what the chapter programs need of any vocabulary, whatever its file format. Text in,
// token ids out for prompts; ids back to text for output, all at once or one token at a time.
//
// Three kinds implement it: llama2.c's tokenizer.bin (common/tokenizer/llama2c_tokenizer.hpp), and
// the byte-pair encodings of Hugging Face tokenizer.json and tiktoken files
// (common/tokenizer/bpe_tokenizer.hpp). common/tokenizer/tokenizer_files.hpp reads any of them from
// a path or a model folder.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvheap {

/// \brief A vocabulary that encodes text to token ids and decodes ids to text.
class Tokenizer {
 public:
  /// \brief Destroys the implementation behind the interface.
  virtual ~Tokenizer() = default;

  /// \brief Token ids for `text`, with the vocabulary's beginning-of-sequence token first when
  /// `add_bos` and the vocabulary adds one (Qwen's does not), and its end-of-sequence token last
  /// when the vocabulary also adds that (a GGUF file's add_eos_token). Special tokens written in
  /// the text ("<|im_start|>") become their ids.
  [[nodiscard]] virtual std::vector<int> encode(std::string_view text, bool add_bos) const = 0;

  /// \brief The text of `ids`, as printed for a reader: special tokens (BOS, end of turn) are left
  /// out. Throws InputError on an id outside the vocabulary.
  [[nodiscard]] virtual std::string decode(std::span<const int> ids) const = 0;

  /// \brief The bytes token `id` adds to the output after `prev` (-1 before the first token).
  /// They may end inside a UTF-8 character that the next token completes; TextStream assembles
  /// them. Throws InputError on an id outside the vocabulary.
  [[nodiscard]] virtual std::string piece_bytes(int prev, int id) const = 0;

  /// \brief Whether `id` is a special token (BOS, end of turn): decode and TextStream print
  /// nothing for it.
  [[nodiscard]] virtual bool is_special(int id) const = 0;

  /// \brief One past the largest id the tokenizer can produce: the model's embedding needs at
  /// least this many rows.
  [[nodiscard]] virtual int vocab_size() const = 0;

  /// \brief Id of the special or added token written `text` ("<|eot_id|>"), or -1.
  [[nodiscard]] virtual int special_id(std::string_view text) const = 0;

  /// \brief A few words on the format and size, for messages ("tokenizer.json, byte-level BPE").
  [[nodiscard]] virtual std::string describe() const = 0;

 protected:
  /// \brief Only an implementation constructs a Tokenizer.
  Tokenizer() = default;
  /// \brief Copied as part of an implementation only.
  Tokenizer(const Tokenizer&) = default;
  /// \brief Copied as part of an implementation only.
  Tokenizer& operator=(const Tokenizer&) = default;
  /// \brief Moved as part of an implementation only.
  Tokenizer(Tokenizer&&) = default;
  /// \brief Moved as part of an implementation only.
  Tokenizer& operator=(Tokenizer&&) = default;
};

/// \brief Text of generated tokens as they arrive, for streaming output: each push returns what
/// can be printed now. A UTF-8 character split across tokens is held back until it is whole, so
/// nothing printed is ever half a character; bytes that can never form one print as U+FFFD.
class TextStream {
 public:
  /// \brief A stream over `tok`, which must outlive it.
  explicit TextStream(const Tokenizer& tok) : tok_(&tok) {}
  /// \brief Takes the next token; returns the text that became complete (maybe "").
  [[nodiscard]] std::string push(int id);
  /// \brief Ends the stream: the held bytes of an unfinished character, as U+FFFD.
  [[nodiscard]] std::string finish();

 private:
  const Tokenizer* tok_;
  int prev_ = -1;     // the last token that is not special, or -1 at the start
  std::string held_;  // bytes of a character still waiting for its continuation bytes
};

}  // namespace kvheap
