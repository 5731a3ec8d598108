#include "common/tokenizer/gguf_tokenizer.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "common/tokenizer/split_pattern.hpp"
#include "common/tokenizer/tokenizer_json.hpp"

namespace kvheap {

namespace {

// llama.cpp's token types.
constexpr std::int64_t kUnknown = 2;
constexpr std::int64_t kControl = 3;
constexpr std::int64_t kUserDefined = 4;
constexpr std::int64_t kByte = 6;
constexpr std::int64_t kLastType = kByte;  // the types run 0 (undefined) to 6 (byte)

// The split patterns of the pre-tokenizers llama.cpp names, as their tokenizer.json files write
// them. Qwen's is Llama 3's with single digits.
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kDigits = R"(\p{N})";
constexpr const char* kKnownPre =
    "default, gpt2, gpt-2, llama-bpe, llama3, llama-v3, qwen2, smollm";

[[noreturn]] void fail(const GgufFile& f, const std::string& what) {
  throw InputError(fmt::format("GGUF file '{}': {}", f.source(), what));
}

PreTokenizeStep split_step(std::string_view pattern, const std::string& where) {
  PreTokenizeStep s;
  s.kind = PreTokenizeStep::Kind::Split;
  s.pattern = std::make_shared<const SplitPattern>(pattern, where);
  return s;
}

PreTokenizeStep byte_level_step(bool gpt2_regex, const std::string& where) {
  PreTokenizeStep s;
  s.kind = PreTokenizeStep::Kind::ByteLevel;
  if (gpt2_regex) s.pattern = std::make_shared<const SplitPattern>(SplitPattern::kGpt2, where);
  return s;
}

/// The pre-tokenizer llama.cpp applies for `pre` (tokenizer.ggml.pre).
void gpt2_pre_tokenizer(const GgufFile& f, const std::string& pre, BpeParts& parts) {
  const std::string where = fmt::format("GGUF file '{}': tokenizer.ggml.pre '{}'", f.source(), pre);
  if (pre.empty() || pre == "default" || pre == "gpt2" || pre == "gpt-2") {
    parts.pre_tokenizer.push_back(byte_level_step(true, where));
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    parts.pre_tokenizer.push_back(split_step(SplitPattern::kLlama3, where));
    parts.pre_tokenizer.push_back(byte_level_step(false, where));
    parts.ignore_merges = true;
  } else if (pre == "qwen2") {
    parts.pre_tokenizer.push_back(split_step(kQwen2, where));
    parts.pre_tokenizer.push_back(byte_level_step(false, where));
  } else if (pre == "smollm") {
    parts.pre_tokenizer.push_back(split_step(kDigits, where));
    parts.pre_tokenizer.push_back(byte_level_step(true, where));
  } else {
    fail(f, fmt::format("tokenizer.ggml.pre is '{}', a pre-tokenizer kvheap does not know; it "
                        "knows {}",
                        pre, kKnownPre));
  }
}

/// Merges "left right" -> the pair of ids and the id of their concatenation, by rank.
void read_merges(const GgufFile& f, const std::unordered_map<std::string_view, int>& id_of,
                 BpeParts& parts) {
  const std::vector<std::string_view> merges = f.strings("tokenizer.ggml.merges", true);
  parts.merges.reserve(merges.size());
  std::string joined;
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string_view m = merges[rank];
    const std::size_t space = m.find(' ');
    if (space == std::string_view::npos || m.find(' ', space + 1) != std::string_view::npos)
      fail(f, fmt::format("tokenizer.ggml.merges[{}] is {:?}, not two tokens separated by one "
                          "space",
                          rank, m.substr(0, 60)));
    const std::string_view left = m.substr(0, space), right = m.substr(space + 1);
    joined.assign(left);
    joined += right;
    const auto l = id_of.find(left), r = id_of.find(right), merged = id_of.find(joined);
    if (l == id_of.end() || r == id_of.end() || merged == id_of.end())
      fail(f, fmt::format("tokenizer.ggml.merges[{}] ({:?}) names {:?}, which is not in "
                          "tokenizer.ggml.tokens",
                          rank, m.substr(0, 60),
                          l == id_of.end()   ? left
                          : r == id_of.end() ? right
                                             : joined));
    const std::uint64_t key =
        (static_cast<std::uint64_t>(l->second) << 32) | static_cast<std::uint32_t>(r->second);
    parts.merges.emplace(key, PairMerge{static_cast<double>(rank), merged->second});
  }
}

/// SentencePiece BPE: every split of a normal piece into two pieces merges into it, the pieces
/// that score highest first.
void score_merges(const std::vector<std::string_view>& tokens, const std::vector<double>& scores,
                  const std::vector<double>& types,
                  const std::unordered_map<std::string_view, int>& id_of, BpeParts& parts) {
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    if (types[id] != 1) continue;
    const std::string_view t = tokens[id];
    for (std::size_t cut = 1; cut < t.size(); ++cut) {
      if ((static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) continue;  // inside a character
      const auto l = id_of.find(t.substr(0, cut)), r = id_of.find(t.substr(cut));
      if (l == id_of.end() || r == id_of.end()) continue;
      const std::uint64_t key =
          (static_cast<std::uint64_t>(l->second) << 32) | static_cast<std::uint32_t>(r->second);
      parts.merges.emplace(key, PairMerge{-scores[id], static_cast<int>(id)});
    }
  }
}

}  // namespace

BpeParts gguf_tokenizer_parts(const GgufFile& f) {
  const std::string& model = f.require_string("tokenizer.ggml.model");
  if (model != "gpt2" && model != "llama")
    fail(f, fmt::format("tokenizer.ggml.model is '{}'; kvheap reads gpt2 (byte-level BPE) and "
                        "llama (SentencePiece BPE) tokenizers",
                        model));
  const std::vector<std::string_view> tokens = f.strings("tokenizer.ggml.tokens", true);
  if (tokens.empty()) fail(f, "tokenizer.ggml.tokens is empty");
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<int>::max() / 2))
    fail(f, fmt::format("tokenizer.ggml.tokens lists {} tokens", tokens.size()));
  std::vector<double> types = f.numbers("tokenizer.ggml.token_type");
  if (types.empty()) types.assign(tokens.size(), 1);
  std::vector<double> scores = f.numbers("tokenizer.ggml.scores");
  if (types.size() != tokens.size() || (model == "llama" && scores.size() != tokens.size()))
    fail(f, fmt::format("tokenizer.ggml.tokens lists {} tokens, but token_type has {} entries "
                        "and scores {}; expected one of each per token",
                        tokens.size(), types.size(), scores.size()));

  BpeParts parts;
  parts.source = f.source();
  parts.format = "GGUF";
  parts.byte_level = model == "gpt2";
  parts.drop_missing_bytes = parts.byte_level;
  parts.tokens.resize(tokens.size());
  parts.present.assign(tokens.size(), 1);
  std::unordered_map<std::string_view, int> id_of;  // as the file writes the token
  id_of.reserve(tokens.size());
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    // A float array, or an integer past the types llama.cpp defines, is a corrupt file: checked
    // before the conversion, which a value such as 1e300 would overflow.
    if (!(types[id] >= 0 && types[id] <= kLastType) || types[id] != std::floor(types[id]))
      fail(f, fmt::format("tokenizer.ggml.token_type[{}] is {}; expected a token type from 0 to {}",
                          id, types[id], kLastType));
    const auto type = static_cast<std::int64_t>(types[id]);
    const bool added = type == kControl || type == kUserDefined || type == kUnknown;
    if (added && !tokens[id].empty())
      parts.added.push_back({std::string(tokens[id]), static_cast<int>(id),
                             /*special=*/type != kUserDefined, /*normalized=*/false});
    if (parts.byte_level && !added) {
      std::string why;
      std::optional<std::string> bytes = bytes_of_byte_level(tokens[id], &why);
      if (!bytes) fail(f, fmt::format("tokenizer.ggml.tokens[{}]: {}", id, why));
      parts.tokens[id] = std::move(*bytes);
    } else {
      parts.tokens[id] = std::string(tokens[id]);
    }
    id_of.emplace(tokens[id], static_cast<int>(id));  // the first of repeated texts wins
    if (type == kUnknown && parts.unk_id < 0) parts.unk_id = static_cast<int>(id);
  }

  const auto last = static_cast<std::int64_t>(tokens.size()) - 1;
  const bool spm = model == "llama";
  const auto bos = f.int_or("tokenizer.ggml.bos_token_id", spm ? 1 : -1, -1, last);
  const auto eos = f.int_or("tokenizer.ggml.eos_token_id", spm ? 2 : -1, -1, last);
  // llama.cpp's defaults: SentencePiece vocabularies add BOS, byte-level ones nothing.
  if (f.bool_or("tokenizer.ggml.add_bos_token", spm) && bos >= 0)
    parts.bos_id = static_cast<int>(bos);
  if (f.bool_or("tokenizer.ggml.add_eos_token", false) && eos >= 0)
    parts.eos_id = static_cast<int>(eos);

  if (parts.byte_level) {
    gpt2_pre_tokenizer(f, f.string_or("tokenizer.ggml.pre"), parts);
    read_merges(f, id_of, parts);
  } else {
    // A space before the text (add_space_prefix, on by default), every space as "▁".
    if (f.bool_or("tokenizer.ggml.add_space_prefix", true)) {
      parts.normalizer.push_back({NormalizeStep::Kind::Prepend, "", "\u2581"});
      parts.strip_leading_spaces = 1;
    }
    parts.normalizer.push_back({NormalizeStep::Kind::Replace, " ", "\u2581"});
    parts.byte_fallback = true;
    parts.space_marker = "\u2581";
    parts.decode_byte_tokens = true;
    for (std::size_t id = 0; id < tokens.size(); ++id)
      if (static_cast<std::int64_t>(types[id]) == kByte && tokens[id].size() != 6)
        fail(f, fmt::format("tokenizer.ggml.tokens[{}] is a byte token written {:?}; expected "
                            "<0xNN>",
                            id, tokens[id]));
    score_merges(tokens, scores, types, id_of, parts);
  }
  return parts;
}

std::unique_ptr<BpeTokenizer> load_gguf_tokenizer(const std::string& path) {
  const GgufFile f(path);
  return std::make_unique<BpeTokenizer>(gguf_tokenizer_parts(f));
}

}  // namespace kvheap
