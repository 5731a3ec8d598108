// SplitPattern over PCRE2 (Debian's libpcre2-8), JIT-compiled where the library supports it.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "common/tokenizer/split_pattern.hpp"

#include <fmt/format.h>
#include <pcre2.h>

#include <memory>

#include "base/error.hpp"
#include "common/tokenizer/utf8.hpp"

namespace kvheap {

namespace {

// PCRE2's \s also matches U+180E (MONGOLIAN VOWEL SEPARATOR), which Unicode stopped counting as
// white space in 6.3; Oniguruma's and Rust's \s are exactly the White_Space property. So \s and
// \S become that property, inside character classes too.
std::string with_unicode_white_space(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char next = pattern[++i];
    if (next == 's') {
      out += R"(\p{White_Space})";
    } else if (next == 'S') {
      out += R"(\P{White_Space})";
    } else {
      out += '\\';
      out += next;
    }
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// The JIT's stack and the match context that hands it out, one per thread: JIT matching of long
// runs (a megabyte of letters is one \p{L}+ match) needs more than PCRE2's 32 KiB default.
struct JitContext {
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  JitContext() {
    if (stack != nullptr && context != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~JitContext() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
  JitContext(const JitContext&) = delete;
  JitContext& operator=(const JitContext&) = delete;
  JitContext(JitContext&&) = delete;
  JitContext& operator=(JitContext&&) = delete;
};

pcre2_match_context* thread_match_context() {
  thread_local JitContext jit;
  return jit.context;
}

}  // namespace

SplitPattern::SplitPattern(std::string_view pattern, std::string where)
    : pattern_(pattern), where_(std::move(where)) {
  const std::string translated = with_unicode_white_space(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr)
    throw InputError(
        fmt::format("{}: the split regex {:?} does not compile: {} (at offset {} of "
                    "the pattern as PCRE2 read it)",
                    where_, pattern_, pcre2_message(error), offset));
  // Without JIT support PCRE2 interprets the pattern: slower, and the same answers.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

SplitPattern::~SplitPattern() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void SplitPattern::split(std::string_view text, std::vector<std::string_view>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  if (!match) throw std::bad_alloc();
  pcre2_match_context* context = thread_match_context();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t gap = 0;  // start of the text not yet handed out
  std::size_t at = 0;   // where the next search starts
  while (at < text.size()) {
    const int rc =
        pcre2_match(code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, match.get(), context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw InputError(fmt::format("{}: the split regex {:?} failed on a {}-byte text: {}", where_,
                                   pattern_, text.size(), pcre2_message(rc)));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const std::size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {  // an empty match splits nothing: search again one character on
      const std::size_t step = utf8_char_length(text, begin);
      at = begin + (step == 0 ? 1 : step);
      continue;
    }
    if (begin > gap) out.push_back(text.substr(gap, begin - gap));
    out.push_back(text.substr(begin, end - begin));
    gap = at = end;
  }
  if (gap < text.size()) out.push_back(text.substr(gap));
}

}  // namespace kvheap
