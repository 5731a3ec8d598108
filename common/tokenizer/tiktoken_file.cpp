// tiktoken file -> BpeParts, with Llama 3's split pattern and special tokens.
#include "common/tokenizer/tiktoken_file.hpp"

#include <fmt/format.h>

#include <unordered_map>

#include "base/error.hpp"
#include "common/util/file_checks.hpp"

namespace kvheap {

namespace {

// Llama 3's file is 2.2 MB; a file many times larger is something else.
constexpr std::uint64_t kMaxTiktokenBytes = std::uint64_t{64} << 20;
constexpr long kMaxRank = (1 << 21) - 1;  // as tokenizer.json ids: 8x the largest vocabulary

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with its padding; false for anything else.
bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  std::size_t pad = 0;
  while (pad < 2 && in[in.size() - 1 - pad] == '=') ++pad;
  std::uint32_t acc = 0;
  int bits = 0;
  for (std::size_t i = 0; i < in.size() - pad; ++i) {
    const int v = base64_value(in[i]);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return !out.empty() && (acc & ((1u << bits) - 1)) == 0;  // no stray bits in the padding
}

bool parse_rank(std::string_view s, long& rank) {
  if (s.empty() || s.size() > 9) return false;
  rank = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    rank = rank * 10 + (c - '0');
  }
  return true;
}

}  // namespace

const std::vector<std::string>& llama3_special_tokens() {
  static const std::vector<std::string> tokens = [] {
    std::vector<std::string> t = {"<|begin_of_text|>",
                                  "<|end_of_text|>",
                                  "<|reserved_special_token_0|>",
                                  "<|reserved_special_token_1|>",
                                  "<|finetune_right_pad_id|>",
                                  "<|reserved_special_token_2|>",
                                  "<|start_header_id|>",
                                  "<|end_header_id|>",
                                  "<|eom_id|>",
                                  "<|eot_id|>",
                                  "<|python_tag|>"};
    for (int i = 3; t.size() < 256; ++i)
      t.push_back(fmt::format("<|reserved_special_token_{}|>", i));
    return t;
  }();
  return tokens;
}

bool looks_like_tiktoken(std::string_view head) {
  const std::size_t end = std::min(head.find('\n'), head.size());
  const std::string_view line = head.substr(0, end);
  const std::size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0) return false;
  std::string bytes;
  long rank = 0;
  std::string_view number = line.substr(space + 1);
  if (number.ends_with('\r')) number.remove_suffix(1);
  return base64_decode(line.substr(0, space), bytes) && parse_rank(number, rank);
}

BpeParts parse_tiktoken(std::string_view text, const std::string& path) {
  BpeParts parts;
  parts.source = path;
  parts.format = "tiktoken file";
  parts.byte_level = true;
  parts.ignore_merges = true;  // tiktoken looks a whole piece up before merging
  std::unordered_map<std::string_view, int> id_of;
  std::vector<int> line_of;  // [ranks] the line that gave each rank
  std::string bytes;
  int line_number = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty()) continue;
    auto fail = [&](const std::string& what) {
      throw InputError(
          fmt::format("tiktoken file '{}' line {}: {}; expected a base64 token, a "
                      "space and its rank, like \"IQ== 0\"",
                      path, line_number, what));
    };
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos) fail("no space between token and rank");
    long rank = 0;
    if (!parse_rank(line.substr(space + 1), rank) || rank > kMaxRank)
      fail(fmt::format("the rank {:?} is not a number from 0 to {}", line.substr(space + 1),
                       kMaxRank));
    if (!base64_decode(line.substr(0, space), bytes))
      fail(fmt::format("{:?} is not base64", line.substr(0, space)));
    const auto r = static_cast<std::size_t>(rank);
    if (r >= parts.tokens.size()) {
      parts.tokens.resize(r + 1);
      parts.present.resize(r + 1, 0);
      line_of.resize(r + 1, 0);
    }
    if (parts.present[r])
      fail(fmt::format("rank {} is also on line {}; expected each rank once", rank, line_of[r]));
    parts.tokens[r] = bytes;
    parts.present[r] = 1;
    line_of[r] = line_number;
  }
  if (parts.tokens.empty())
    throw InputError(
        fmt::format("tiktoken file '{}' holds no token; expected lines of a base64 "
                    "token, a space and its rank",
                    path));
  id_of.reserve(parts.tokens.size());
  for (std::size_t id = 0; id < parts.tokens.size(); ++id) {
    if (!parts.present[id]) continue;
    const auto [it, fresh] = id_of.emplace(parts.tokens[id], static_cast<int>(id));
    if (!fresh)
      throw InputError(fmt::format(
          "tiktoken file '{}' line {}: the token of rank {} is also rank "
          "{} (line {}); expected each token once",
          path, line_of[id], id, it->second, line_of[static_cast<std::size_t>(it->second)]));
  }
  // tiktoken merges the adjacent pair whose concatenation has the lowest rank: every way of
  // cutting a token into two tokens is a merge at that token's rank.
  for (std::size_t id = 0; id < parts.tokens.size(); ++id) {
    const std::string_view t = parts.tokens[id];
    for (std::size_t cut = 1; cut < t.size(); ++cut) {
      const auto l = id_of.find(t.substr(0, cut)), r = id_of.find(t.substr(cut));
      if (l == id_of.end() || r == id_of.end()) continue;
      const std::uint64_t key =
          (static_cast<std::uint64_t>(l->second) << 32) | static_cast<std::uint32_t>(r->second);
      parts.merges.emplace(key, PairMerge{static_cast<double>(id), static_cast<int>(id)});
    }
  }
  parts.pre_tokenizer.push_back(
      {PreTokenizeStep::Kind::Split,
       std::make_shared<const SplitPattern>(SplitPattern::kLlama3, "Llama 3's split pattern"),
       false, "", PreTokenizeStep::Prepend::Never, false});
  const int first_special = static_cast<int>(parts.tokens.size());
  const std::vector<std::string>& specials = llama3_special_tokens();
  for (std::size_t i = 0; i < specials.size(); ++i)
    parts.added.push_back({specials[i], first_special + static_cast<int>(i), true, false});
  parts.bos_id = first_special;  // <|begin_of_text|>
  return parts;
}

std::unique_ptr<BpeTokenizer> load_tiktoken(const std::string& path) {
  const std::string text = read_regular_file(
      path, "tokenizer", "a tiktoken file (base64 token and rank per line)", kMaxTiktokenBytes);
  return std::make_unique<BpeTokenizer>(parse_tiktoken(text, path));
}

}  // namespace kvheap
