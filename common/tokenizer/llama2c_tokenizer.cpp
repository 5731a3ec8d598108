// Loading, encoding and decoding for the llama2.c BPE tokenizer.
#include "common/tokenizer/llama2c_tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

#include "base/error.hpp"
#include "common/tokenizer/bpe_merge.hpp"
#include "common/util/file_checks.hpp"

namespace kvheap {

static_assert(std::endian::native == std::endian::little,
              "tokenizer.bin is little-endian and is read by memcpy");

namespace {

// Real vocabularies top out at a few dozen bytes per piece (Llama 2: 27). Anything beyond this
// means the bytes are not a tokenizer at all, and trusting the length would allocate gigabytes.
constexpr std::int32_t kMaxPieceBytes = 1 << 16;

// The whole file is read into memory. Real tokenizers are a few megabytes at most (Llama 2's 32000
// tokens: 434 KB), so a larger file is something else, and the limit keeps a wrong path from
// exhausting memory.
constexpr std::uint64_t kMaxTokenizerBytes = std::uint64_t{1} << 30;

// A cursor over the whole file in memory. The file is small (Llama 2: 434 KB), and knowing the
// remaining byte count makes every truncation message exact.
struct Reader {
  std::string_view data;
  std::size_t pos = 0;

  [[nodiscard]] std::size_t remaining() const { return data.size() - pos; }
  template <typename T>
  T take() {
    T v;
    std::memcpy(&v, data.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
};

// One token record: float32 score, int32 length, the piece's bytes.
struct Record {
  float score = 0.0f;
  std::int32_t length = 0;
  std::string_view bytes;
};

enum class ReadStatus { Ok, EndOfFile, TruncatedHeader, BadLength, TruncatedPiece };

ReadStatus read_record(Reader& r, Record& out) {
  if (r.remaining() == 0) return ReadStatus::EndOfFile;
  if (r.remaining() < sizeof(float) + sizeof(std::int32_t)) return ReadStatus::TruncatedHeader;
  out.score = r.take<float>();
  out.length = r.take<std::int32_t>();
  if (out.length < 0 || out.length > kMaxPieceBytes) return ReadStatus::BadLength;
  if (r.remaining() < static_cast<std::size_t>(out.length)) return ReadStatus::TruncatedPiece;
  out.bytes = r.data.substr(r.pos, static_cast<std::size_t>(out.length));
  r.pos += static_cast<std::size_t>(out.length);
  return ReadStatus::Ok;
}

// How many whole records follow, or nullopt when the tail does not parse as records. Used only
// to say how big the other model's vocabulary is.
std::optional<long long> count_records(Reader r) {
  long long n = 0;
  Record rec;
  for (;;) {
    const ReadStatus s = read_record(r, rec);
    if (s == ReadStatus::EndOfFile) return n;
    if (s != ReadStatus::Ok) return std::nullopt;
    ++n;
  }
}

// The file goes on after the model's vocab_size tokens. Whole records there mean a larger
// vocabulary (a tokenizer of another model); anything else means the file is damaged.
[[noreturn]] void reject_trailing_bytes(const std::string& path, int vocab_size, const Reader& r) {
  const std::string head = fmt::format(
      "tokenizer '{}' has {} bytes left after the last of its {} tokens (the model's "
      "vocab_size); expected the file to end there",
      path, r.remaining(), vocab_size);
  if (const std::optional<long long> extra = count_records(r)) {
    throw InputError(
        fmt::format("{}. They hold {} more {}: the file is a {}-token vocabulary and "
                    "belongs to a different model",
                    head, *extra, *extra == 1 ? "token" : "tokens", vocab_size + *extra));
  }
  throw InputError(
      fmt::format("{}. They are not whole token records: the file is corrupt or not a llama2.c "
                  "tokenizer.bin",
                  head));
}

// Length of the UTF-8 sequence starting at text[i], or 1 when the bytes there are not a
// well-formed sequence (a stray continuation byte, a lead byte without its continuations).
std::size_t code_point_length(std::string_view text, std::size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  std::size_t len = 1;
  if ((lead & 0xE0u) == 0xC0u) {
    len = 2;
  } else if ((lead & 0xF0u) == 0xE0u) {
    len = 3;
  } else if ((lead & 0xF8u) == 0xF0u) {
    len = 4;
  } else {
    return 1;  // ASCII, or a byte that cannot start a sequence
  }
  if (i + len > text.size()) return 1;
  for (std::size_t k = 1; k < len; ++k) {
    if ((static_cast<unsigned char>(text[i + k]) & 0xC0u) != 0x80u) return 1;
  }
  return len;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

Llama2cTokenizer Llama2cTokenizer::load(const std::string& path, int vocab_size) {
  if (vocab_size <= 0) {
    throw InputError(
        fmt::format("cannot load tokenizer '{}' for a vocab_size of {}: the model's "
                    "vocab_size must be positive",
                    path, vocab_size));
  }
  const std::string data =
      read_regular_file(path, "tokenizer", "a llama2.c tokenizer.bin", kMaxTokenizerBytes);
  Reader r{data};
  if (r.remaining() < sizeof(std::int32_t)) {
    throw InputError(
        fmt::format("tokenizer '{}' is {} bytes long, too short for its 4-byte "
                    "header: is it a llama2.c tokenizer.bin?",
                    path, data.size()));
  }
  const auto max_len = r.take<std::int32_t>();
  if (max_len < 0 || max_len > kMaxPieceBytes) {
    throw InputError(
        fmt::format("tokenizer '{}' declares a max_token_length of {}; expected "
                    "0..{}: is it a llama2.c tokenizer.bin?",
                    path, max_len, kMaxPieceBytes));
  }

  Llama2cTokenizer t;
  // Every record takes at least 8 bytes, so the file bounds the reservation even when the
  // caller's vocab_size is absurd.
  const std::size_t expected =
      std::min(static_cast<std::size_t>(vocab_size), r.remaining() / 8 + 1);
  t.pieces_.reserve(expected);
  t.scores_.reserve(expected);
  for (int i = 0; i < vocab_size; ++i) {
    Record rec;
    const std::size_t before = r.remaining();
    switch (read_record(r, rec)) {
      case ReadStatus::Ok: break;
      case ReadStatus::EndOfFile:
        throw InputError(
            fmt::format("tokenizer '{}' holds only {} tokens but the model's "
                        "vocab_size is {}: it belongs to a different model",
                        path, i, vocab_size));
      case ReadStatus::TruncatedHeader:
        throw InputError(
            fmt::format("tokenizer '{}' is truncated inside token {}: expected 8 "
                        "bytes of score and length, found {}",
                        path, i, before));
      case ReadStatus::BadLength:
        throw InputError(
            fmt::format("tokenizer '{}': token {} has a length of {} bytes; expected "
                        "0..{} (the file is corrupt or not a llama2.c tokenizer)",
                        path, i, rec.length, kMaxPieceBytes));
      case ReadStatus::TruncatedPiece:
        throw InputError(
            fmt::format("tokenizer '{}' is truncated inside token {}: its piece "
                        "needs {} bytes, found {}",
                        path, i, rec.length, r.remaining()));
    }
    if (std::isnan(rec.score)) {
      throw InputError(fmt::format("tokenizer '{}': token {} has a NaN merge score", path, i));
    }
    t.pieces_.emplace_back(rec.bytes);
    t.scores_.push_back(rec.score);
  }
  if (r.remaining() != 0) reject_trailing_bytes(path, vocab_size, r);
  t.build_index();
  return t;
}

void Llama2cTokenizer::build_index() {
  index_.clear();
  index_.reserve(pieces_.size());
  // emplace keeps the first id of a duplicated piece, so lookups are deterministic.
  for (std::size_t i = 0; i < pieces_.size(); ++i) index_.emplace(pieces_[i], static_cast<int>(i));
}

void Llama2cTokenizer::check_id(int id) const {
  if (id < 0 || id >= vocab_size()) {
    throw InputError(
        fmt::format("token id {} is out of range: the tokenizer's vocabulary has {} "
                    "tokens (ids 0..{})",
                    id, vocab_size(), vocab_size() - 1));
  }
}

std::string_view Llama2cTokenizer::piece(int id) const {
  check_id(id);
  return pieces_[static_cast<std::size_t>(id)];
}

float Llama2cTokenizer::score(int id) const {
  check_id(id);
  return scores_[static_cast<std::size_t>(id)];
}

int Llama2cTokenizer::find(std::string_view piece) const {
  const auto it = index_.find(piece);
  return it == index_.end() ? -1 : it->second;
}

void Llama2cTokenizer::append_code_point(std::string_view bytes, std::vector<int>& out) const {
  if (const int id = find(bytes); id >= 0) {
    out.push_back(id);
    return;
  }
  // sentencepiece's byte fallback: the 256 tokens after <unk>, <s>, </s> are <0x00>..<0xFF>.
  for (const char c : bytes) {
    const int id = kFirstByte + static_cast<unsigned char>(c);
    if (id >= vocab_size()) {
      throw InputError(
          fmt::format("cannot encode byte 0x{:02X}: the vocabulary ({} tokens) has "
                      "neither a piece for it nor byte-fallback tokens",
                      static_cast<unsigned char>(c), vocab_size()));
    }
    out.push_back(id);
  }
}

std::vector<int> Llama2cTokenizer::encode(std::string_view text, bool add_bos) const {
  // Positions below are ints; a gigabyte prompt is a mistake, not something to tokenize.
  if (text.size() > (std::size_t{1} << 30)) {
    throw InputError(
        fmt::format("cannot encode {} bytes of text: the limit is 1 GiB", text.size()));
  }
  std::vector<int> tokens;
  tokens.reserve(text.size() + 2);
  if (add_bos) tokens.push_back(kBos);
  if (text.empty()) return tokens;

  // sentencepiece treats the text as if it started a word, so the first word gets the same
  // " word" piece it would get mid-sentence.
  const std::size_t first = tokens.size();
  append_code_point(" ", tokens);
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = code_point_length(text, i);
    append_code_point(text.substr(i, len), tokens);
    i += len;
  }

  // Merge by the merged piece's score, highest first: priority is its negation. A float's
  // negation is exact in a double, so equal scores stay equal and the order is llama2.c's.
  BpeMerger merger;
  std::string joined;
  merger.run(tokens, first, [&](int left, int right) -> std::optional<PairMerge> {
    joined.assign(pieces_[static_cast<std::size_t>(left)]);
    joined.append(pieces_[static_cast<std::size_t>(right)]);
    const int merged = find(joined);
    if (merged < 0) return std::nullopt;
    return PairMerge{-static_cast<double>(scores_[static_cast<std::size_t>(merged)]), merged};
  });
  return tokens;
}

std::string Llama2cTokenizer::decode_piece(int prev_token, int token) const {
  check_id(token);
  if (token == kBos || token == kEos) return {};
  std::string_view p = pieces_[static_cast<std::size_t>(token)];
  // The first piece after BOS carries the dummy-prefix space that encode added.
  if (prev_token == kBos && !p.empty() && p.front() == ' ') p.remove_prefix(1);
  if (p.size() == 6 && p.starts_with("<0x") && p.back() == '>') {
    const int hi = hex_digit(p[3]);
    const int lo = hex_digit(p[4]);
    if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
  }
  return std::string(p);
}

std::string Llama2cTokenizer::describe() const {
  return fmt::format("llama2.c tokenizer.bin, {} tokens", vocab_size());
}

std::string Llama2cTokenizer::decode(std::span<const int> ids) const {
  std::string out;
  int prev = kBos;
  for (const int id : ids) {
    out += decode_piece(prev, id);
    prev = id;
  }
  return out;
}

}  // namespace kvheap
