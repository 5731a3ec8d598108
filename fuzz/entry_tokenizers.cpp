// Fuzz entry points for the BPE tokenizers: the tokenizer.json reader, the tiktoken reader, and
// encoding with the committed real vocabularies.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "common/tokenizer/bpe_tokenizer.hpp"
#include "common/tokenizer/split_pattern.hpp"
#include "common/tokenizer/tiktoken_file.hpp"
#include "common/tokenizer/tokenizer_json.hpp"
#include "common/tokenizer/utf8.hpp"
#include "fuzz/entry_points.hpp"
#include "fuzz/fuzz_support.hpp"
#include "tests/support/source_tree.hpp"

namespace kvheap {

namespace {

using fuzz::require;

// The quadratic reference merge is the oracle only on short texts, so that long inputs still run
// at thousands per second.
constexpr std::size_t kReferenceMaxBytes = 128;

// What must hold for any text a tokenizer accepts: ids it can decode, a stream that prints the
// same text as decode and never half a character.
void check_encoding(const BpeTokenizer& tok, std::string_view text, const std::vector<int>& ids) {
  for (const int id : ids)
    require(id >= 0 && id < tok.vocab_size(),
            "encode produced id " + std::to_string(id) + " outside the vocabulary");
  const std::string decoded = tok.decode(ids);
  require(utf8_valid(decoded), "decode produced text that is not UTF-8");
  TextStream stream(tok);
  std::string streamed;
  for (const int id : ids) {
    const std::string out = stream.push(id);
    require(utf8_valid(out), "a stream push printed half a character");
    streamed += out;
  }
  streamed += stream.finish();
  require(streamed == decoded, "the streamed text differs from decode");
  (void)text;
}

// A byte-level tokenizer that changes nothing before splitting gives the text back exactly, its
// special tokens as written: the bytes of the pieces are the bytes of the text.
bool round_trips(const BpeParts& parts) {
  return parts.byte_level && parts.normalizer.empty() &&
         std::none_of(parts.pre_tokenizer.begin(), parts.pre_tokenizer.end(),
                      [](const PreTokenizeStep& s) {
                        return s.prefix_space || s.kind == PreTokenizeStep::Kind::Metaspace;
                      });
}

// tiktoken's own algorithm, restated plainly: each piece of the split is a whole token if it is
// one, else its bytes merged by the lowest rank of any adjacent pair's concatenation, leftmost
// first, rescanning after every merge.
std::vector<int> reference_tiktoken(const std::map<std::string, int>& rank, std::string_view text) {
  const SplitPattern pattern(SplitPattern::kLlama3, "reference");
  std::vector<std::string_view> pieces;
  pattern.split(text, pieces);
  std::vector<int> ids;
  for (const std::string_view piece : pieces) {
    if (const auto whole = rank.find(std::string(piece)); whole != rank.end()) {
      ids.push_back(whole->second);
      continue;
    }
    std::vector<std::string> parts;
    for (const char c : piece) parts.emplace_back(1, c);
    for (;;) {
      int best = std::numeric_limits<int>::max();
      std::size_t at = 0;
      for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
        const auto it = rank.find(parts[i] + parts[i + 1]);
        if (it != rank.end() && it->second < best) {
          best = it->second;
          at = i;
        }
      }
      if (best == std::numeric_limits<int>::max()) break;
      parts[at] += parts[at + 1];
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    for (const std::string& p : parts) ids.push_back(rank.at(p));
  }
  return ids;
}

}  // namespace

FuzzOutcome fuzz_tokenizer_json(std::span<const std::uint8_t> input, std::string* why) {
  const std::vector<std::string_view> parts = fuzz::split_parts(fuzz::as_text(input));
  try {
    BpeParts read = parse_tokenizer_json(parts[0], "fuzz/tokenizer.json");
    const bool exact = round_trips(read);
    const BpeTokenizer tok(std::move(read));
    if (parts.size() < 2) return FuzzOutcome::Accepted;
    const std::vector<int> ids = tok.encode(parts[1], true);
    check_encoding(tok, parts[1], ids);
    if (exact)
      require(tok.decode(tok.encode(parts[1], false), false) == utf8_replace_invalid(parts[1]),
              "a byte-level tokenizer.json does not give its text back");
  } catch (const Error& e) {
    return fuzz::rejected(e, why);
  }
  return FuzzOutcome::Accepted;
}

FuzzOutcome fuzz_tiktoken(std::span<const std::uint8_t> input, std::string* why) {
  const std::vector<std::string_view> parts = fuzz::split_parts(fuzz::as_text(input));
  try {
    BpeParts read = parse_tiktoken(parts[0], "fuzz/tokenizer.model");
    std::map<std::string, int> rank;
    for (std::size_t id = 0; id < read.tokens.size(); ++id)
      if (read.present[id]) rank.emplace(read.tokens[id], static_cast<int>(id));
    const BpeTokenizer tok(std::move(read));
    if (parts.size() < 2) return FuzzOutcome::Accepted;
    const std::string text = utf8_replace_invalid(parts[1]);
    const std::vector<int> ids = tok.encode(text, false);
    check_encoding(tok, text, ids);
    require(tok.decode(ids, false) == text, "a tiktoken file does not give its text back");
    if (text.size() <= kReferenceMaxBytes && text.find("<|") == std::string::npos)
      require(ids == reference_tiktoken(rank, text), "encode disagrees with tiktoken's algorithm");
  } catch (const Error& e) {
    return fuzz::rejected(e, why);
  }
  return FuzzOutcome::Accepted;
}

FuzzOutcome fuzz_bpe_encode(std::span<const std::uint8_t> input, std::string* /*why*/) {
  // The committed test vocabularies: Qwen's as a tokenizer.json (NFC first), Llama 3's tiktoken
  // form of it, and Mistral's SentencePiece-style file.
  static const std::filesystem::path data = test::source_dir() / "tests" / "data" / "tokenizers";
  static const std::unique_ptr<BpeTokenizer> qwen =
      load_tokenizer_json((data / "qwen16k.tokenizer.json").string());
  static const std::unique_ptr<BpeTokenizer> llama3 =
      load_tiktoken((data / "qwen16k.tiktoken").string());
  static const std::unique_ptr<BpeTokenizer> mistral =
      load_tokenizer_json((data / "mistral_subset.tokenizer.json").string());
  const std::string_view text = fuzz::as_text(input);
  const std::string valid = utf8_replace_invalid(text);
  for (const BpeTokenizer* tok : {qwen.get(), llama3.get(), mistral.get()}) {
    const std::vector<int> ids = tok->encode(text, input.size() % 2 == 1);
    check_encoding(*tok, text, ids);
    require(ids == tok->encode(valid, input.size() % 2 == 1),
            "invalid UTF-8 encodes unlike its U+FFFD replacement");
  }
  require(qwen->decode(qwen->encode(text, false), false) == utf8_nfc(valid),
          "the Qwen tokenizer does not give the NFC text back");
  require(llama3->decode(llama3->encode(text, false), false) == valid,
          "the tiktoken tokenizer does not give the text back");
  return FuzzOutcome::Accepted;
}

int fuzz_tokenizer_json_one(const std::uint8_t* data, std::size_t size) {
  (void)fuzz_tokenizer_json({data, size}, nullptr);
  return 0;
}
int fuzz_tiktoken_one(const std::uint8_t* data, std::size_t size) {
  (void)fuzz_tiktoken({data, size}, nullptr);
  return 0;
}
int fuzz_bpe_encode_one(const std::uint8_t* data, std::size_t size) {
  (void)fuzz_bpe_encode({data, size}, nullptr);
  return 0;
}

}  // namespace kvheap
