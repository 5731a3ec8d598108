#include "common/program/prompts.hpp"

#include <fmt/format.h>

#include <sstream>

#include "base/error.hpp"
#include "common/util/file_checks.hpp"
#include "common/program/token_ids.hpp"
#include "common/program/options.hpp"

namespace kvheap {

namespace {
/// A prompts file larger than this is not a prompt list (65536 prompts of 1 KiB each).
constexpr std::uint64_t kMaxPromptsBytes = std::uint64_t{64} << 20;
}  // namespace

std::vector<std::vector<int>> load_prompts(const CommonOptions& o, int copies,
                                           const std::string& prompts_file, const ModelConfig& c,
                                           const Tokenizer* tok) {
  std::vector<std::vector<int>> out;
  if (prompts_file.empty()) {
    if (copies <= 0 || copies > kMaxSeqs)
      throw UsageError(fmt::format("--num-seqs must be from 1 to {}, got {}", kMaxSeqs, copies));
    out.assign(copies, resolve_prompt(o, c, tok));
    return out;
  }
  // Read through the project's file checks: a FIFO, a directory or a device is named as such,
  // and a file far larger than any prompt list is refused before it is read.
  std::istringstream f(read_regular_file(prompts_file, "--prompts file",
                                         "a text file with one prompt per line", kMaxPromptsBytes));
  std::string line;
  for (int number = 1; std::getline(f, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a file written on Windows
    if (line.empty()) continue;
    if (out.size() == static_cast<std::size_t>(kMaxSeqs))
      throw InputError(
          fmt::format("--prompts: '{}' holds more than {} prompts", prompts_file, kMaxSeqs));
    const std::string where = fmt::format("--prompts '{}' line {}", prompts_file, number);
    try {
      out.push_back(tok ? tok->encode(line, true) : parse_token_ids(line, c.vocab_size, where));
    } catch (const UsageError& e) {  // a bad line is bad file content (exit 1), not a bad flag
      // Without a tokenizer every line must be ids; a line of words most likely wanted one.
      const bool words = line.find_first_of("0123456789") == std::string::npos;
      throw InputError(fmt::format(
          "{}{}", e.what(),
          words ? "; a line of text needs a tokenizer: --tokenizer, or a --model folder that "
                  "ships one"
                : ""));
    }
  }
  if (out.empty()) throw InputError(fmt::format("--prompts: '{}' holds no prompt", prompts_file));
  return out;
}

}  // namespace kvheap
