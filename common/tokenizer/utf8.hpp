// UTF-8 helpers the tokenizers share: validating text, replacing what is not UTF-8, finding where
// a character is cut off, and Unicode normalization form C.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvheap {

/// \brief Length of the well-formed UTF-8 character at `s[i]` (1-4), or 0 when the bytes there
/// are not one (a stray continuation byte, an overlong form, a surrogate, a cut-off sequence).
[[nodiscard]] std::size_t utf8_char_length(std::string_view s, std::size_t i);

/// \brief `s` with every ill-formed part replaced by U+FFFD, one per maximal subpart as Unicode
/// recommends (and Python's `bytes.decode(errors="replace")` and Rust's `from_utf8_lossy` do).
[[nodiscard]] std::string utf8_replace_invalid(std::string_view s);

/// \brief Whether `s` is well-formed UTF-8.
[[nodiscard]] bool utf8_valid(std::string_view s);

/// \brief How many bytes at the end of `s` begin a character that is not finished yet: a lead
/// byte and fewer continuation bytes than it announces (0-3). Those bytes may still become a
/// character when more arrive.
[[nodiscard]] std::size_t utf8_incomplete_tail(std::string_view s);

/// \brief Appends code point `cp` to `out` in UTF-8.
void utf8_append(std::string& out, char32_t cp);

/// \brief The Unicode normalization form C of the well-formed UTF-8 text `s` (utf8proc).
[[nodiscard]] std::string utf8_nfc(std::string_view s);

}  // namespace kvheap
