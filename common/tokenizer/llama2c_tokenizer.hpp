// Llama2cTokenizer: the byte-pair-encoding vocabulary of llama2.c's tokenizer.bin, turning text
// into token ids for a prompt and ids back into text for output.
//
// The file holds the sentencepiece vocabulary with its merge scores; the "▁" word marker is already
// replaced by a plain space. Encoding follows llama2.c: a dummy-prefix space, one piece per UTF-8
// code point (raw bytes <0xNN> when the vocabulary lacks it), then greedy merging of the adjacent
// pair whose concatenation scores highest (the merge loop of common/tokenizer/bpe_merge.hpp).
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/tokenizer/tokenizer.hpp"

namespace kvheap {

/// \brief A llama2.c BPE vocabulary: pieces, their merge scores, and a piece -> id index.
class Llama2cTokenizer final : public Tokenizer {
 public:
  /// \brief Id of the beginning-of-sequence token in every llama2.c vocabulary.
  static constexpr int kBos = 1;
  /// \brief Id of the end-of-sequence token.
  static constexpr int kEos = 2;
  /// \brief Id of the byte token <0x00>; byte b is id kFirstByte + b.
  static constexpr int kFirstByte = 3;

  /// \brief Reads exactly `vocab_size` tokens from a llama2.c tokenizer.bin.
  ///
  /// Throws InputError when the file cannot be opened, is not a regular file (a directory, FIFO
  /// or device) or is larger than 1 GiB, holds fewer tokens than `vocab_size` or bytes after the
  /// last of them (a tokenizer of a different model, or a damaged file), or has a negative, absurd
  /// or truncated length anywhere.
  [[nodiscard]] static Llama2cTokenizer load(const std::string& path, int vocab_size);

  /// \brief Token ids for `text`: [BOS] when `add_bos`, then the dummy-prefix space and the text,
  /// merged pair by pair. Empty text gives [BOS] or []. Invalid UTF-8 is encoded byte by byte.
  [[nodiscard]] std::vector<int> encode(std::string_view text, bool add_bos) const override;

  /// \brief Text of `token` as it should be printed after `prev_token`.
  ///
  /// Strips the dummy-prefix space from the first piece after BOS, turns <0xNN> into the raw
  /// byte, and gives "" for BOS and EOS. Throws InputError when `token` is not a valid id.
  [[nodiscard]] std::string decode_piece(int prev_token, int token) const;

  /// \brief Concatenated text of `ids`, skipping BOS and EOS; the inverse of encode.
  ///
  /// The first id is decoded as if it followed BOS, because encode starts every text with the
  /// dummy-prefix space whether or not it adds BOS. Throws InputError on an invalid id.
  [[nodiscard]] std::string decode(std::span<const int> ids) const override;

  /// \brief decode_piece, with the start of the text (-1) read as following BOS.
  [[nodiscard]] std::string piece_bytes(int prev, int id) const override {
    return decode_piece(prev < 0 ? kBos : prev, id);
  }
  /// \brief Whether `id` is BOS or EOS, which decode to "".
  [[nodiscard]] bool is_special(int id) const override { return id == kBos || id == kEos; }
  /// \brief Always -1: encode reads "<s>" in a text as the letters, not as BOS.
  [[nodiscard]] int special_id(std::string_view /*text*/) const override { return -1; }
  /// \brief "llama2.c tokenizer.bin, N tokens".
  [[nodiscard]] std::string describe() const override;

  /// \brief Number of tokens in the vocabulary.
  [[nodiscard]] int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  /// \brief The raw piece of `id` (with a leading space for word starts, "<0x0A>" for bytes).
  [[nodiscard]] std::string_view piece(int id) const;
  /// \brief The merge score of `id`; higher merges first.
  [[nodiscard]] float score(int id) const;
  /// \brief Id of a piece, or -1 when the vocabulary does not hold it.
  [[nodiscard]] int find(std::string_view piece) const;

 private:
  Llama2cTokenizer() = default;
  void build_index();
  void check_id(int id) const;
  void append_code_point(std::string_view bytes, std::vector<int>& out) const;

  std::vector<std::string> pieces_;  // [vocab_size] piece text, id order
  std::vector<float> scores_;        // [vocab_size] merge priority, id order
  // A transparent hash lets find() and the merge loop probe with a string_view without building a
  // std::string per lookup; the keys own their text so a Llama2cTokenizer copies and moves safely.
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int, Hash, std::equal_to<>> index_;  // piece -> lowest id
};

}  // namespace kvheap
