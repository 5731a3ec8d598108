// Scratch files, input splitting, the built-in vocabulary and the reference encoder for the fuzz
// entry points.
#include "fuzz/fuzz_support.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "fuzz/entry_points.hpp"

namespace kvheap::fuzz {

namespace fs = std::filesystem;

namespace {

// Owns the scratch folder so that a normal exit (libFuzzer's -max_total_time, a finished test)
// removes it. A crash leaves it behind, which is what one wants when reproducing.
struct ScratchFolder {
  fs::path path;
  ScratchFolder() {
    std::error_code ec;
    const fs::path base = fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0
                              ? fs::path("/dev/shm")
                              : fs::temp_directory_path();
    path = base / ("kvheap-fuzz-" + std::to_string(::getpid()));
    fs::remove_all(path, ec);
    fs::create_directories(path);
  }
  ~ScratchFolder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void append_record(std::string& out, float score, std::string_view piece) {
  const auto len = static_cast<std::int32_t>(piece.size());
  out.append(reinterpret_cast<const char*>(&score), sizeof score);
  out.append(reinterpret_cast<const char*>(&len), sizeof len);
  out.append(piece);
}

// Length of the well-formed UTF-8 sequence at text[i], or 1 for a byte that does not start one:
// the contract Llama2cTokenizer::encode documents, restated independently.
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto b = static_cast<unsigned char>(text[i]);
  const std::size_t n = b >= 0xF0 && b < 0xF8   ? 4
                        : b >= 0xE0 && b < 0xF0 ? 3
                        : b >= 0xC0 && b < 0xE0 ? 2
                                                : 1;
  if (n == 1 || i + n > text.size()) return 1;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(text[i + k]) >> 6) != 2) return 1;
  return n;
}

}  // namespace

const fs::path& scratch_dir() {
  static const ScratchFolder folder;
  return folder.path;
}

std::string write_scratch(const std::string& name, std::string_view bytes) {
  const fs::path p = scratch_dir() / name;
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  // The harness itself failing is neither a kvheap error nor a finding worth a crash report.
  if (!out) throw std::runtime_error("fuzz harness: cannot write scratch file " + p.string());
  return p.string();
}

void remove_scratch(const std::string& name) {
  std::error_code ec;
  fs::remove(scratch_dir() / name, ec);
}

std::string_view as_text(std::span<const std::uint8_t> input) {
  return {reinterpret_cast<const char*>(input.data()), input.size()};
}

std::vector<std::string_view> split_parts(std::string_view text) {
  std::vector<std::string_view> parts;
  for (;;) {
    const std::size_t at = text.find(kFuzzPartSeparator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + kFuzzPartSeparator.size());
  }
}

std::string builtin_vocab_bytes() {
  // Pieces after the byte tokens, in id order. Longer merges score higher, as in a trained
  // vocabulary; "an"/"nd" and "in"/"ng" tie on purpose.
  static constexpr const char* kPieces[] = {
      " ",    "e",   "t",     "a",  "o",   "n",     "i",     "h",      "s",        "r",
      "d",    "l",   "u",     "w",  "c",   "m",     "y",     "g",      "p",        "b",
      "k",    "v",   "f",     "O",  "T",   ".",     ",",     "!",      "\xC3\xA9", "\xE6\x97\xA5",
      "th",   "he",  "an",    "nd", "in",  "ng",    "er",    "on",     "ce",       "up",
      " t",   " a",  " w",    " s", "the", " the",  "and",   " and",   "ing",      "was",
      " was", " up", " upon", "On", " On", " Once", " time", " there", " little",  " happy"};
  std::string out;
  const std::int32_t max_len = 16;
  out.append(reinterpret_cast<const char*>(&max_len), sizeof max_len);
  append_record(out, 0.0f, "<unk>");
  append_record(out, 0.0f, "\n<s>\n");
  append_record(out, 0.0f, "\n</s>\n");
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    append_record(out, 0.0f, hex);
  }
  for (const char* p : kPieces) {
    const std::size_t len = std::strlen(p);
    append_record(out, len == 1 ? -100.0f : -10.0f / static_cast<float>(len), p);
  }
  return out;
}

const Llama2cTokenizer& builtin_tokenizer() {
  static const Llama2cTokenizer tok = [] {
    const std::string bytes = builtin_vocab_bytes();
    const std::string path = write_scratch("builtin-tokenizer.bin", bytes);
    // Header (4 bytes), then one record per token; count them to get the vocab size.
    int n = 0;
    for (std::size_t pos = 4; pos < bytes.size(); ++n) {
      std::int32_t len;
      std::memcpy(&len, bytes.data() + pos + 4, 4);
      pos += 8 + static_cast<std::size_t>(len);
    }
    return Llama2cTokenizer::load(path, n);
  }();
  return tok;
}

std::vector<int> reference_encode(const Llama2cTokenizer& t, std::string_view text, bool add_bos) {
  std::vector<int> ids;
  if (add_bos) ids.push_back(Llama2cTokenizer::kBos);
  if (text.empty()) return ids;
  std::vector<int> pieces;
  auto push = [&](std::string_view cp) {
    if (const int id = t.find(cp); id >= 0) {
      pieces.push_back(id);
      return;
    }
    for (const char c : cp)
      pieces.push_back(Llama2cTokenizer::kFirstByte + static_cast<unsigned char>(c));
  };
  push(" ");
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_length(text, i);
    push(text.substr(i, n));
    i += n;
  }
  for (;;) {
    std::optional<float> best;
    std::size_t best_at = 0;
    int best_id = -1;
    for (std::size_t i = 0; i + 1 < pieces.size(); ++i) {
      const std::string joined =
          std::string(t.piece(pieces[i])) + std::string(t.piece(pieces[i + 1]));
      const int id = t.find(joined);
      if (id >= 0 && (!best || t.score(id) > *best)) {
        best = t.score(id);
        best_at = i;
        best_id = id;
      }
    }
    if (!best) break;
    pieces[best_at] = best_id;
    pieces.erase(pieces.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  return ids;
}

FuzzOutcome rejected(const std::exception& e, std::string* why) {
  if (why != nullptr) *why = e.what();
  return FuzzOutcome::Rejected;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::logic_error("fuzz oracle failed: " + what);
}

}  // namespace kvheap::fuzz
