// Parsing of token ids given on the command line ("--prompt-ids 1,403,407"), for models whose
// vocabulary ships without a tokenizer (stories260K) and for exact, tokenizer-free prompts.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kvheap {

/// \brief `text` for a message: in single quotes, at most `most` bytes of it, each byte that is
/// not printable ASCII (or is a quote or backslash) written \xNN, and when cut, how long it was.
/// A 10 MB line, raw binary or a NUL byte then make one short, readable line.
[[nodiscard]] std::string quoted_excerpt(std::string_view text, std::size_t most = 60);

/// \brief Parses comma-separated token ids such as "1, 403,407" into a list.
///
/// Spaces and tabs around each id are allowed. Throws UsageError naming the flag, the element and
/// its 1-based position when the text is empty, or an element is empty, not an integer, or
/// outside 0..vocab_size-1 (however large): a bad value of the flag, exit code 2. A caller that
/// reads the ids from a file turns that into InputError (prompts.cpp).
[[nodiscard]] std::vector<int> parse_token_ids(std::string_view text, int vocab_size,
                                               std::string_view flag = "--prompt-ids");

}  // namespace kvheap
