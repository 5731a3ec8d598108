// Parsing of comma-separated token ids, with messages that point at the offending element.
#include "common/program/token_ids.hpp"

#include <fmt/format.h>

#include <charconv>
#include <system_error>

#include "base/error.hpp"

namespace kvheap {

namespace {

constexpr std::string_view kBlank = " \t";

std::string_view trim(std::string_view s) {
  const std::size_t begin = s.find_first_not_of(kBlank);
  if (begin == std::string_view::npos) return {};
  const std::size_t end = s.find_last_not_of(kBlank);
  return s.substr(begin, end - begin + 1);
}

}  // namespace

std::string quoted_excerpt(std::string_view text, std::size_t most) {
  std::string out = "'";
  for (std::size_t i = 0; i < text.size() && i < most; ++i) {
    const auto ch = static_cast<unsigned char>(text[i]);
    if (ch >= 0x20 && ch < 0x7f && ch != '\'' && ch != '\\') {
      out += static_cast<char>(ch);
    } else {
      out += fmt::format("\\x{:02x}", ch);
    }
  }
  out += "'";
  if (text.size() > most) out += fmt::format(" (its first {} of {} bytes)", most, text.size());
  return out;
}

std::vector<int> parse_token_ids(std::string_view text, int vocab_size, std::string_view flag) {
  constexpr std::string_view kExpected = "expected comma-separated token ids like 1,2,3";
  if (vocab_size <= 0) {
    throw InputError(fmt::format("cannot check {}: the model's vocab_size is {}, not positive",
                                 flag, vocab_size));
  }
  if (trim(text).empty()) throw UsageError(fmt::format("{} is empty; {}", flag, kExpected));

  std::vector<int> ids;
  std::size_t start = 0;
  for (int position = 1;; ++position) {
    const std::size_t comma = text.find(',', start);
    const std::string_view raw = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::string_view element = trim(raw);
    if (element.empty()) {
      // A trailing comma is the common slip; say so instead of a bare "empty".
      const bool trailing = comma == std::string_view::npos;
      throw UsageError(fmt::format("{}: element {} is empty{}; {}", flag, position,
                                   trailing ? " (trailing comma?)" : "", kExpected));
    }
    int id = 0;
    const char* first = element.data();
    const char* last = element.data() + element.size();
    const auto [ptr, ec] = std::from_chars(first, last, id);
    if (ec == std::errc::result_out_of_range) {  // outside the vocabulary, as 512 of 512 is
      throw UsageError(fmt::format(
          "{}: element {} ({}) is out of range: the model's vocabulary has {} tokens (ids 0..{})",
          flag, position, quoted_excerpt(element), vocab_size, vocab_size - 1));
    }
    if (ec != std::errc() || ptr != last) {
      throw UsageError(fmt::format("{}: element {} ({}) is not an integer; {}", flag, position,
                                   quoted_excerpt(element), kExpected));
    }
    if (id < 0 || id >= vocab_size) {
      throw UsageError(
          fmt::format("{}: token id {} at position {} is out of range: the model's "
                      "vocabulary has {} tokens (ids 0..{})",
                      flag, id, position, vocab_size, vocab_size - 1));
    }
    ids.push_back(id);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ids;
}

}  // namespace kvheap
