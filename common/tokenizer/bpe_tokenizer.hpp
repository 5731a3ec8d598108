// BpeTokenizer: the byte-pair encodings of Hugging Face tokenizer.json files (byte-level ones of
// GPT-2, Llama 3 and Qwen, and SentencePiece-style ones of Llama 2, Mistral and TinyLlama) and of
// tiktoken files (Llama 3's original/tokenizer.model).
//
// Encoding runs the stages of a tokenizer.json, in its order:
//   1. added tokens ("<|im_start|>", "<s>") are found in the text first and become their ids;
//   2. the rest is normalized (NFC; the SentencePiece "▁" for spaces, and one before the text);
//   3. a pre-tokenizer cuts it into pieces (a split regex; the byte-level alphabet; "▁" runs);
//   4. BPE merges each piece: from its bytes (byte-level) or its characters, with <0xNN> tokens
//      for characters the vocabulary lacks (byte fallback), merging the pair of lowest rank first.
// tokenizer_json.cpp and tiktoken_file.cpp read the files into BpeParts; this file runs them.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/tokenizer/bpe_merge.hpp"
#include "common/tokenizer/split_pattern.hpp"
#include "common/tokenizer/tokenizer.hpp"

namespace kvheap {

/// \brief A token matched in the text before normalization and BPE.
struct AddedToken {
  std::string content;      ///< its text, "<|eot_id|>"
  int id = 0;               ///< its id
  bool special = false;     ///< printed as nothing by decode (BOS, end of turn)
  bool normalized = false;  ///< matched in the normalized text rather than the raw one
};

/// \brief One step of a normalizer.
struct NormalizeStep {
  /// \brief NFC; a prefix before the text; every `from` replaced by `to`.
  enum class Kind { Nfc, Prepend, Replace };
  Kind kind = Kind::Nfc;  ///< what it does
  std::string from;       ///< Replace: the text replaced
  std::string to;         ///< Prepend: the prefix; Replace: the new text
};

/// \brief One step of a pre-tokenizer.
struct PreTokenizeStep {
  /// \brief Split: by `pattern`. ByteLevel: a space before each piece that lacks one when
  /// `prefix_space`, then the GPT-2 pattern when `pattern` is set. Metaspace: spaces become
  /// `replacement`, one goes before the piece by `prepend`, and with `split` each run of it
  /// starts a new piece.
  enum class Kind { Split, ByteLevel, Metaspace };
  /// \brief Which pieces Metaspace puts a `replacement` before: all, the text's first, none.
  enum class Prepend { Always, First, Never };
  Kind kind = Kind::Split;                      ///< what it does
  std::shared_ptr<const SplitPattern> pattern;  ///< Split, ByteLevel with use_regex
  bool prefix_space = false;                    ///< ByteLevel: add_prefix_space
  std::string replacement;                      ///< Metaspace: "▁"
  Prepend prepend = Prepend::Always;            ///< Metaspace
  bool split = false;                           ///< Metaspace
};

/// \brief Everything a BPE tokenizer file says, in the form BpeTokenizer runs.
struct BpeParts {
  std::string source;  ///< the file, for messages
  std::string format;  ///< "tokenizer.json" or "tiktoken"
  /// [vocab] id -> token: its raw bytes for a byte-level vocabulary, else its text ("▁the",
  /// "<0x0A>"). An id no token has is "" and absent from `present`.
  std::vector<std::string> tokens;
  std::vector<char> present;  ///< [vocab] whether the id is a token
  /// (left << 32 | right) -> the merge of two adjacent token ids
  std::unordered_map<std::uint64_t, PairMerge> merges;
  bool byte_level = false;     ///< BPE starts from bytes, not characters
  bool byte_fallback = false;  ///< characters without a token become <0xNN> tokens
  bool ignore_merges = false;  ///< a piece that is a whole token stays one (Llama 3, tiktoken)
  /// Byte-level: a byte without a token is left out of the ids (as llama.cpp does; GGUF
  /// vocabularies lack some control bytes) instead of refusing the vocabulary at load.
  bool drop_missing_bytes = false;
  int unk_id = -1;                             ///< token of a character no token covers (-1: none)
  bool fuse_unk = false;                       ///< adjacent unknown characters become one unk
  std::vector<NormalizeStep> normalizer;       ///< in order
  std::vector<PreTokenizeStep> pre_tokenizer;  ///< in order
  std::vector<AddedToken> added;               ///< matched before everything else
  int bos_id = -1;                             ///< what encode(add_bos) puts first (-1: nothing)
  int eos_id = -1;                             ///< what encode(add_bos) puts last (-1: nothing)
  // Decoding. Byte-level tokens are their bytes. SentencePiece-style ones turn `space_marker`
  // into a space and, with `decode_byte_tokens`, <0xNN> into its byte; the text then loses up to
  // `strip_leading_spaces` leading spaces.
  std::string space_marker;         ///< "▁", or "" for a byte-level vocabulary
  bool decode_byte_tokens = false;  ///< the ByteFallback decoder
  int strip_leading_spaces = 0;     ///< the Strip decoder's start, or 1 for Metaspace
};

/// \brief A BPE tokenizer read from a tokenizer.json or a tiktoken file.
class BpeTokenizer final : public Tokenizer {
 public:
  /// \brief Builds the tokenizer of `parts`; throws InputError naming `parts.source` when a byte
  /// or fallback token it needs is missing.
  explicit BpeTokenizer(BpeParts parts);
  BpeTokenizer(const BpeTokenizer&) = delete;  // added_by_id_ points into parts_
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;
  BpeTokenizer(BpeTokenizer&&) = delete;
  BpeTokenizer& operator=(BpeTokenizer&&) = delete;
  ~BpeTokenizer() override = default;

  /// \brief See Tokenizer::encode. Text that is not UTF-8 is first made so, each ill-formed part
  /// becoming U+FFFD (as Python hands it to the reference libraries after
  /// `decode(errors="replace")`).
  [[nodiscard]] std::vector<int> encode(std::string_view text, bool add_bos) const override;
  /// \brief See Tokenizer::decode; special tokens print nothing.
  [[nodiscard]] std::string decode(std::span<const int> ids) const override {
    return decode(ids, /*skip_special=*/true);
  }
  /// \brief The text of `ids`, special tokens written out unless `skip_special`. Bytes that do
  /// not form UTF-8 become U+FFFD, one per maximal ill-formed part.
  [[nodiscard]] std::string decode(std::span<const int> ids, bool skip_special) const;
  /// \brief See Tokenizer::piece_bytes.
  [[nodiscard]] std::string piece_bytes(int prev, int id) const override;
  /// \brief See Tokenizer::is_special.
  [[nodiscard]] bool is_special(int id) const override;
  /// \brief See Tokenizer::vocab_size: the largest id of a token or added token, plus one.
  [[nodiscard]] int vocab_size() const override { return vocab_size_; }
  /// \brief See Tokenizer::special_id: any added token.
  [[nodiscard]] int special_id(std::string_view text) const override;
  /// \brief E.g. "tokenizer.json 'PATH' (byte-level BPE, 151665 ids)".
  [[nodiscard]] std::string describe() const override;
  /// \brief The id that encode(add_bos) puts first, or -1.
  [[nodiscard]] int bos_id() const { return parts_.bos_id; }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Index = std::unordered_map<std::string, int, Hash, std::equal_to<>>;

  void encode_segment(std::string_view raw, bool at_start, std::vector<int>& out) const;
  void encode_normalized(std::string_view text, bool at_start, std::vector<int>& out) const;
  void pre_tokenize(std::string_view text, bool at_start, std::deque<std::string>& arena,
                    std::vector<std::string_view>& pieces) const;
  void encode_piece(std::string_view piece, std::vector<int>& out) const;
  void encode_word(std::string_view word, std::vector<int>& out) const;
  [[nodiscard]] int find(std::string_view token) const;
  void check_id(int id) const;
  [[nodiscard]] std::string piece_text(int id, bool skip_special) const;
  void strip_leading_spaces(std::string& text) const;
  void split_added(std::string_view text,
                   const std::array<std::vector<const AddedToken*>, 256>& by_first_byte,
                   const std::function<void(std::string_view, std::size_t)>& segment,
                   std::vector<int>& out) const;

  // The merges again, in an open-addressing table: the merge loop looks a pair up for every
  // adjacent pair it offers, and std::unordered_map's buckets made that most of encoding's time.
  struct PairTable {
    std::vector<std::uint64_t> keys;  // [capacity] pair key, or kEmpty
    std::vector<PairMerge> merges;    // [capacity]
    std::uint64_t mask = 0;
    int shift = 60;  // 64 - log2(capacity)
    static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
    // Fibonacci hashing: the top bits of the product mix both halves of the key.
    [[nodiscard]] std::uint64_t slot_of(std::uint64_t key) const {
      return (key * 0x9E3779B97F4A7C15ULL) >> shift;
    }
    void build(const std::unordered_map<std::uint64_t, PairMerge>& from);
    [[nodiscard]] const PairMerge* find(std::uint64_t key) const;
  };

  BpeParts parts_;
  PairTable pairs_;
  Index index_;                        // token -> id
  std::array<int, 256> byte_token_{};  // byte -> its token (byte-level) or <0xNN> (fallback), -1
  // Added tokens by their first byte, longest first, matched in the raw and the normalized text.
  std::array<std::vector<const AddedToken*>, 256> added_raw_, added_normalized_;
  std::unordered_map<int, const AddedToken*> added_by_id_;
  std::unordered_map<int, char> byte_of_token_;  // <0xNN> token -> its byte (byte fallback)
  int vocab_size_ = 0;
  // SentencePiece-style text reaches BPE as one piece (Llama 2 and Mistral have no
  // pre-tokenizer), so a megabyte is one merge over a million symbols. When no token holds the
  // word marker after another character, no merge can join a word to the marker that starts the
  // next, and each word is merged on its own with the same result.
  std::string word_marker_;  // "▁" when that holds, else ""
};

}  // namespace kvheap
