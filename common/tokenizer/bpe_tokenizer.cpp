// Encoding and decoding with a BPE tokenizer read from a tokenizer.json or tiktoken file.
#include "common/tokenizer/bpe_tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.hpp"
#include "common/tokenizer/utf8.hpp"

namespace kvheap {

namespace {

// As the llama2.c tokenizer: positions are ints, and a gigabyte prompt is a mistake.
constexpr std::size_t kMaxTextBytes = std::size_t{1} << 30;

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (!from.empty() && text.substr(i, from.size()) == from) {
      out += to;
      i += from.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

// `prefix` + `s`, in place.
void prepend(std::string& s, std::string_view prefix) {
  std::string out;
  out.reserve(prefix.size() + s.size());
  out.append(prefix);
  out.append(s);
  s = std::move(out);
}

std::uint64_t pair_key(int left, int right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
         static_cast<std::uint32_t>(right);
}

}  // namespace

void BpeTokenizer::PairTable::build(const std::unordered_map<std::uint64_t, PairMerge>& from) {
  std::size_t capacity = 16;
  shift = 60;
  while (capacity < 2 * from.size()) {  // at most half full: short probe runs
    capacity *= 2;
    --shift;
  }
  keys.assign(capacity, kEmpty);
  merges.assign(capacity, PairMerge{0, 0});
  mask = capacity - 1;
  for (const auto& [key, merge] : from) {
    std::uint64_t slot = slot_of(key);
    while (keys[slot] != kEmpty) slot = (slot + 1) & mask;
    keys[slot] = key;
    merges[slot] = merge;
  }
}

const PairMerge* BpeTokenizer::PairTable::find(std::uint64_t key) const {
  for (std::uint64_t slot = slot_of(key);; slot = (slot + 1) & mask) {
    if (keys[slot] == key) return &merges[slot];
    if (keys[slot] == kEmpty) return nullptr;
  }
}

BpeTokenizer::BpeTokenizer(BpeParts parts) : parts_(std::move(parts)) {
  pairs_.build(parts_.merges);
  index_.reserve(parts_.tokens.size());
  for (std::size_t id = 0; id < parts_.tokens.size(); ++id)
    if (parts_.present[id]) index_.emplace(parts_.tokens[id], static_cast<int>(id));
  vocab_size_ = static_cast<int>(parts_.tokens.size());

  byte_token_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (parts_.byte_level) {
      byte_token_[b] = find(std::string(1, static_cast<char>(b)));
      if (byte_token_[b] < 0 && !parts_.drop_missing_bytes)
        throw InputError(fmt::format(
            "{} '{}': the byte-level vocabulary has no token for byte 0x{:02X}; byte-level BPE "
            "needs one for each of the 256 bytes",
            parts_.format, parts_.source, b));
    } else if (parts_.byte_fallback) {
      byte_token_[b] = find(fmt::format("<0x{:02X}>", b));
      if (byte_token_[b] >= 0) byte_of_token_[byte_token_[b]] = static_cast<char>(b);
    }
  }

  for (const AddedToken& t : parts_.added) {
    vocab_size_ = std::max(vocab_size_, t.id + 1);
    added_by_id_[t.id] = &t;
    auto& bucket = (t.normalized ? added_normalized_
                                 : added_raw_)[static_cast<unsigned char>(t.content.front())];
    bucket.push_back(&t);
  }
  if (!parts_.byte_level && !parts_.space_marker.empty()) {
    const std::string& marker = parts_.space_marker;
    const bool crossing =
        std::any_of(parts_.tokens.begin(), parts_.tokens.end(), [&](const std::string& t) {
          const std::size_t other =
              t.find_first_not_of(marker);  // bytes, but the marker is one character
          for (std::size_t at = t.find(marker); at != std::string::npos;
               at = t.find(marker, at + 1))
            if (other != std::string::npos && other < at) return true;
          return false;
        });
    if (!crossing) word_marker_ = marker;
  }
  for (auto* table : {&added_raw_, &added_normalized_})
    for (auto& bucket : *table)
      std::stable_sort(bucket.begin(), bucket.end(), [](const AddedToken* a, const AddedToken* b) {
        return a->content.size() > b->content.size();
      });
}

int BpeTokenizer::find(std::string_view token) const {
  const auto it = index_.find(token);
  return it == index_.end() ? -1 : it->second;
}

void BpeTokenizer::split_added(std::string_view text,
                               const std::array<std::vector<const AddedToken*>, 256>& by_first_byte,
                               const std::function<void(std::string_view, std::size_t)>& segment,
                               std::vector<int>& out) const {
  // Leftmost-longest, as Hugging Face's added vocabulary matches: the first position where any
  // added token starts, and there the longest one.
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    for (const AddedToken* t : by_first_byte[static_cast<unsigned char>(text[i])]) {
      if (text.substr(i, t->content.size()) == t->content) {
        hit = t;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    segment(text.substr(start, i - start), start);
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  segment(text.substr(start), start);
}

std::vector<int> BpeTokenizer::encode(std::string_view text, bool add_bos) const {
  if (text.size() > kMaxTextBytes)
    throw InputError(
        fmt::format("cannot encode {} bytes of text: the limit is 1 GiB", text.size()));
  std::string repaired;
  if (!utf8_valid(text)) {
    repaired = utf8_replace_invalid(text);
    text = repaired;
  }
  std::vector<int> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && parts_.bos_id >= 0) out.push_back(parts_.bos_id);
  split_added(
      text, added_raw_,
      [&](std::string_view raw, std::size_t offset) { encode_segment(raw, offset == 0, out); },
      out);
  if (add_bos && parts_.eos_id >= 0) out.push_back(parts_.eos_id);
  return out;
}

void BpeTokenizer::encode_segment(std::string_view raw, bool at_start,
                                  std::vector<int>& out) const {
  if (raw.empty()) return;
  std::string text(raw);
  for (const NormalizeStep& step : parts_.normalizer) {
    switch (step.kind) {
      case NormalizeStep::Kind::Nfc: text = utf8_nfc(text); break;
      case NormalizeStep::Kind::Prepend: prepend(text, step.to); break;
      case NormalizeStep::Kind::Replace: text = replace_all(text, step.from, step.to); break;
    }
  }
  split_added(
      text, added_normalized_,
      [&](std::string_view part, std::size_t offset) {
        encode_normalized(part, at_start && offset == 0, out);
      },
      out);
}

void BpeTokenizer::encode_normalized(std::string_view text, bool at_start,
                                     std::vector<int>& out) const {
  if (text.empty()) return;
  std::deque<std::string> arena;  // pieces a pre-tokenizer step rewrote
  std::vector<std::string_view> pieces;
  pre_tokenize(text, at_start, arena, pieces);
  for (const std::string_view piece : pieces) encode_piece(piece, out);
}

void BpeTokenizer::pre_tokenize(std::string_view text, bool at_start,
                                std::deque<std::string>& arena,
                                std::vector<std::string_view>& pieces) const {
  pieces.assign(1, text);
  std::vector<std::string_view> next;
  for (const PreTokenizeStep& step : parts_.pre_tokenizer) {
    next.clear();
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      std::string_view piece = pieces[k];
      switch (step.kind) {
        case PreTokenizeStep::Kind::Split: step.pattern->split(piece, next); break;
        case PreTokenizeStep::Kind::ByteLevel:
          if (step.prefix_space && !piece.starts_with(' ')) {
            std::string& spaced = arena.emplace_back(1, ' ');
            spaced.append(piece);
            piece = spaced;
          }
          if (step.pattern) {
            step.pattern->split(piece, next);
          } else {
            next.push_back(piece);
          }
          break;
        case PreTokenizeStep::Kind::Metaspace: {
          std::string s = replace_all(piece, " ", step.replacement);
          const bool first = at_start && k == 0;
          const bool marked = step.prepend == PreTokenizeStep::Prepend::Always ||
                              (step.prepend == PreTokenizeStep::Prepend::First && first);
          if (marked && !std::string_view(s).starts_with(step.replacement))
            prepend(s, step.replacement);
          arena.push_back(std::move(s));
          const std::string_view all = arena.back();
          if (!step.split) {
            next.push_back(all);
            break;
          }
          // Each replacement character starts a new piece (Hugging Face's MergedWithNext).
          std::size_t begin = 0;
          for (std::size_t at = all.find(step.replacement, 1); at != std::string_view::npos;
               at = all.find(step.replacement, at + 1)) {
            next.push_back(all.substr(begin, at - begin));
            begin = at;
          }
          next.push_back(all.substr(begin));
          break;
        }
      }
    }
    std::erase_if(next, [](std::string_view p) { return p.empty(); });
    pieces.swap(next);
  }
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int>& out) const {
  if (word_marker_.empty()) {
    encode_word(piece, out);
    return;
  }
  // Cut before each marker that follows another character: "▁the▁▁cat" is "▁the", "▁▁cat".
  std::size_t begin = 0;
  for (std::size_t at = piece.find(word_marker_); at != std::string_view::npos;
       at = piece.find(word_marker_, at + word_marker_.size())) {
    if (at > begin && !piece.substr(0, at).ends_with(word_marker_)) {
      encode_word(piece.substr(begin, at - begin), out);
      begin = at;
    }
  }
  encode_word(piece.substr(begin), out);
}

void BpeTokenizer::encode_word(std::string_view piece, std::vector<int>& out) const {
  if (parts_.ignore_merges) {
    if (const int id = find(piece); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::size_t first = out.size();
  thread_local BpeMerger merger;
  const auto merge = [&] {
    merger.run(out, first, [this](int left, int right) -> std::optional<PairMerge> {
      const PairMerge* m = pairs_.find(pair_key(left, right));
      if (m == nullptr) return std::nullopt;
      return *m;
    });
  };
  if (parts_.byte_level) {
    for (const char c : piece) {
      const int id = byte_token_[static_cast<unsigned char>(c)];
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // A byte the vocabulary lacks (drop_missing_bytes) is left out, and no merge crosses it.
      merge();
      first = out.size();
    }
  } else {
    bool last_unk = false;
    for (std::size_t i = 0; i < piece.size();) {
      std::size_t len = utf8_char_length(piece, i);
      if (len == 0) len = 1;  // cannot happen after repair; a byte is still a safe step
      const std::string_view ch = piece.substr(i, len);
      i += len;
      if (const int id = find(ch); id >= 0) {
        out.push_back(id);
        last_unk = false;
        continue;
      }
      const bool bytes = parts_.byte_fallback && std::all_of(ch.begin(), ch.end(), [&](char c) {
                           return byte_token_[static_cast<unsigned char>(c)] >= 0;
                         });
      if (bytes) {
        for (const char c : ch) out.push_back(byte_token_[static_cast<unsigned char>(c)]);
        last_unk = false;
      } else if (parts_.unk_id >= 0) {
        if (!(parts_.fuse_unk && last_unk)) out.push_back(parts_.unk_id);
        last_unk = true;
      } else {
        throw InputError(fmt::format(
            "cannot encode {:?}: {} '{}' has no token for it, no byte-fallback tokens and no "
            "unk_token",
            ch, parts_.format, parts_.source));
      }
    }
  }
  merge();
}

void BpeTokenizer::check_id(int id) const {
  const bool known = id >= 0 && id < vocab_size_ &&
                     ((static_cast<std::size_t>(id) < parts_.present.size() &&
                       parts_.present[static_cast<std::size_t>(id)]) ||
                      added_by_id_.contains(id));
  if (!known)
    throw InputError(fmt::format(
        "token id {} is not in the vocabulary of {} '{}' (ids 0..{}); a model whose ids go past "
        "its tokenizer's was given a tokenizer of another model, or pads its embedding and "
        "sampled a padding row",
        id, parts_.format, parts_.source, vocab_size_ - 1));
}

std::string BpeTokenizer::piece_text(int id, bool skip_special) const {
  check_id(id);
  if (const auto it = added_by_id_.find(id); it != added_by_id_.end())
    return skip_special && it->second->special ? std::string() : it->second->content;
  const std::string& token = parts_.tokens[static_cast<std::size_t>(id)];
  if (parts_.byte_level) return token;
  if (parts_.decode_byte_tokens && token.size() == 6 && token.starts_with("<0x")) {
    const auto b = byte_of_token_.find(id);
    if (b != byte_of_token_.end()) return std::string(1, b->second);
  }
  return replace_all(token, parts_.space_marker, " ");
}

std::string BpeTokenizer::piece_bytes(int prev, int id) const {
  std::string text = piece_text(id, true);
  if (prev < 0) strip_leading_spaces(text);
  return text;
}

std::string BpeTokenizer::decode(std::span<const int> ids, bool skip_special) const {
  std::string bytes;
  int prev = -1;
  for (const int id : ids) {
    std::string text = piece_text(id, skip_special);
    if (prev < 0) strip_leading_spaces(text);
    bytes += text;
    if (!(skip_special && is_special(id))) prev = id;
  }
  return utf8_replace_invalid(bytes);
}

void BpeTokenizer::strip_leading_spaces(std::string& text) const {
  std::size_t n = 0;
  while (n < text.size() && n < static_cast<std::size_t>(parts_.strip_leading_spaces) &&
         text[n] == ' ')
    ++n;
  text.erase(0, n);
}

bool BpeTokenizer::is_special(int id) const {
  const auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && it->second->special;
}

int BpeTokenizer::special_id(std::string_view text) const {
  for (const AddedToken& t : parts_.added)
    if (t.content == text) return t.id;
  return -1;
}

std::string BpeTokenizer::describe() const {
  return fmt::format("{} '{}' ({} BPE, {} ids)", parts_.format, parts_.source,
                     parts_.byte_level ? "byte-level" : "SentencePiece-style", vocab_size_);
}

}  // namespace kvheap
