// UTF-8 validation, replacement of ill-formed parts, and NFC through utf8proc.
#include "common/tokenizer/utf8.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "base/error.hpp"

namespace kvheap {

namespace {

// The well-formed byte sequences, as Unicode's table 3-7 lists them: how many bytes the lead
// byte announces, and the range its first continuation byte must fall in (overlongs and
// surrogates are excluded there; later continuation bytes are always 0x80-0xBF).
struct Lead {
  std::size_t length;  // 0: the byte cannot start a character
  unsigned char lo, hi;
};

Lead lead_of(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes from s[i] follow the pattern of a well-formed character, and how many it needs.
std::pair<std::size_t, std::size_t> match_at(std::string_view s, std::size_t i) {
  const Lead lead = lead_of(static_cast<unsigned char>(s[i]));
  if (lead.length <= 1) return {lead.length, lead.length};
  std::size_t k = 1;
  for (; k < lead.length && i + k < s.size(); ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    const unsigned char lo = k == 1 ? lead.lo : 0x80, hi = k == 1 ? lead.hi : 0xBF;
    if (c < lo || c > hi) break;
  }
  return {k, lead.length};
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

std::size_t utf8_char_length(std::string_view s, std::size_t i) {
  const auto [matched, needed] = match_at(s, i);
  return needed != 0 && matched == needed ? needed : 0;
}

bool utf8_valid(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_char_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto [matched, needed] = match_at(s, i);
    if (needed != 0 && matched == needed) {
      out.append(s.substr(i, needed));
      i += needed;
    } else {  // one U+FFFD for the maximal subpart: the bytes that could still have been valid
      out.append(kReplacement);
      i += matched == 0 ? 1 : matched;
    }
  }
  return out;
}

std::size_t utf8_incomplete_tail(std::string_view s) {
  for (std::size_t k = 1; k <= 3 && k <= s.size(); ++k) {
    const auto [matched, needed] = match_at(s, s.size() - k);
    // The first byte from the end that is not a continuation byte decides.
    if (needed != 0) return matched == k && needed > k ? k : 0;
  }
  return 0;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

std::string nfc_by_library(std::string_view s) {
  utf8proc_uint8_t* raw = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
      &raw, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(raw, &std::free);
  if (n < 0) throw InputError(std::string("cannot normalize text to NFC: ") + utf8proc_errmsg(n));
  return {reinterpret_cast<const char*>(raw), static_cast<std::size_t>(n)};
}

}  // namespace

std::string utf8_nfc(std::string_view s) {
  // NFC never joins a character to an ASCII one after it (no canonical composition ends in
  // ASCII), so the text splits before every ASCII byte: ASCII is copied, and each run of other
  // characters goes to utf8proc with the ASCII character before it (e + U+0301 is é).
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      out += s[i++];
      continue;
    }
    std::size_t begin = i;
    if (begin > 0 && static_cast<unsigned char>(s[begin - 1]) < 0x80) {
      --begin;
      out.pop_back();
    }
    std::size_t end = i;
    while (end < s.size() && static_cast<unsigned char>(s[end]) >= 0x80) ++end;
    out += nfc_by_library(s.substr(begin, end - begin));
    i = end;
  }
  return out;
}

}  // namespace kvheap
