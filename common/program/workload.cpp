#include "common/program/workload.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

#include "base/error.hpp"
#include "common/util/file_checks.hpp"
#include "common/program/prompts.hpp"

namespace kvheap {

namespace {

/// A workload file larger than this is not a request list (65536 requests of 1 KiB each).
constexpr std::uint64_t kMaxWorkloadBytes = std::uint64_t{64} << 20;

constexpr const char* kFields =
    "prompt_ids or prompt, max_new_tokens, stop_ids, and arrival_s or arrival_step";

/// Reads the fields of one line's object; every error names the line.
class LineReader {
 public:
  LineReader(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(fmt::format("{}: {}", where_, what));
  }
  [[nodiscard]] bool has(const char* key) const { return j_.contains(key); }

  /// An integer field within [lo, hi].
  long integer(const char* key, long lo, long hi) const {
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number_integer()) fail(fmt::format("'{}' must be an integer, got {}", key, v.dump()));
    const bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<long>() < 0;
    if (negative ? v.get<long>() < lo : v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
      fail(fmt::format("'{}' must be from {} to {}, got {}", key, lo, hi, v.dump()));
    return v.get<long>();
  }

  /// A list of token ids in the vocabulary of `c`; `nonempty` refuses [].
  std::vector<int> ids(const char* key, const ModelConfig& c, bool nonempty) const {
    const nlohmann::json& v = j_.at(key);
    if (!v.is_array()) fail(fmt::format("'{}' must be a list of token ids, got {}", key, v.dump()));
    if (nonempty && v.empty()) fail(fmt::format("'{}' is empty: give at least one token", key));
    std::vector<int> out;
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const nlohmann::json& e = v[i];
      const bool in_vocab = e.is_number_integer() &&
                            (e.is_number_unsigned()
                                 ? e.get<std::uint64_t>() < static_cast<std::uint64_t>(c.vocab_size)
                                 : e.get<long>() >= 0 && e.get<long>() < c.vocab_size);
      if (!in_vocab)
        fail(fmt::format("'{}' element {} is {}; expected a token id from 0 to {}", key, i + 1,
                         e.dump(), c.vocab_size - 1));
      out.push_back(e.get<int>());
    }
    return out;
  }

  /// A finite number of seconds, from 0 to `most`.
  double seconds(const char* key, double most) const {
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      fail(fmt::format("'{}' must be a number of seconds, 0 or more, got {}", key, v.dump()));
    if (v.get<double>() > most)
      fail(fmt::format("'{}' is {} s; an arrival must be at most {:g} s (a day) after the start",
                       key, v.dump(), most));
    return v.get<double>();
  }

 private:
  const nlohmann::json& j_;
  std::string where_;
};

}  // namespace

std::vector<Request> parse_workload(std::string_view text, const std::string& name,
                                    const ModelConfig& c, const Tokenizer* tok,
                                    int default_max_new_tokens) {
  std::vector<Request> out;
  enum class Arrival { None, Seconds, Steps } kind = Arrival::None;
  int previous_line = 0;
  for (std::size_t start = 0, number = 1; start < text.size(); ++number) {
    const std::size_t nl = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // written on Windows
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const std::string where = fmt::format("--workload '{}' line {}", name, number);
    if (out.size() == static_cast<std::size_t>(kMaxSeqs))
      throw InputError(fmt::format("{}: more than {} requests", where, kMaxSeqs));
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw InputError(
          fmt::format("{}: not a JSON object; expected one request per line, e.g. "
                      "{{\"prompt_ids\": [1, 2, 3], \"max_new_tokens\": 16}}",
                      where));
    const LineReader f(j, where);
    for (const auto& [key, value] : j.items())
      if (key != "prompt_ids" && key != "prompt" && key != "max_new_tokens" && key != "stop_ids" &&
          key != "arrival_s" && key != "arrival_step")
        f.fail(fmt::format("unknown field '{}'; the fields are {}", key, kFields));

    Request r;
    if (f.has("prompt_ids") == f.has("prompt"))
      f.fail("give the prompt once: 'prompt_ids' (token ids) or 'prompt' (text)");
    if (f.has("prompt_ids")) {
      r.prompt = f.ids("prompt_ids", c, true);
    } else {
      const nlohmann::json& p = j.at("prompt");
      if (!p.is_string() || p.get<std::string>().empty())
        f.fail(fmt::format("'prompt' must be some text, got {}", p.dump()));
      if (tok == nullptr) f.fail("'prompt' is text, which needs --tokenizer; or give 'prompt_ids'");
      r.prompt = tok->encode(p.get<std::string>(), true);
    }
    r.max_new_tokens = f.has("max_new_tokens")
                           ? static_cast<int>(f.integer("max_new_tokens", 0, c.max_seq_len))
                           : default_max_new_tokens;
    if (f.has("stop_ids")) r.stop_ids = f.ids("stop_ids", c, false);
    try {
      check_generation_fits(r.prompt.size(), r.max_new_tokens, c,
                            f.has("max_new_tokens")
                                ? std::string("'max_new_tokens'")
                                : std::string("--max-new-tokens (the line gives no "
                                              "'max_new_tokens')"));
    } catch (const Error& e) {
      f.fail(e.what());
    }

    const Arrival mine = f.has("arrival_s")      ? Arrival::Seconds
                         : f.has("arrival_step") ? Arrival::Steps
                                                 : Arrival::None;
    if (f.has("arrival_s") && f.has("arrival_step"))
      f.fail("give one arrival: 'arrival_s' (wall clock) or 'arrival_step' (loop steps)");
    if (mine != Arrival::None && kind != Arrival::None && mine != kind)
      f.fail(fmt::format("arrivals of both kinds in one file: line {} gives '{}', this one '{}'",
                         previous_line, kind == Arrival::Seconds ? "arrival_s" : "arrival_step",
                         mine == Arrival::Seconds ? "arrival_s" : "arrival_step"));
    const Request* before = out.empty() ? nullptr : &out.back();
    if (mine == Arrival::Seconds) {
      r.arrival_seconds = f.seconds("arrival_s", kMaxArrivalSeconds);
    } else if (mine == Arrival::Steps) {
      r.arrival_step = f.integer("arrival_step", 0, std::numeric_limits<int>::max());
    } else if (before != nullptr) {  // no arrival: with the request before it
      r.arrival_seconds = before->arrival_seconds;
      r.arrival_step = before->arrival_step;
    }
    if (mine != Arrival::None) {
      kind = mine;
      previous_line = static_cast<int>(number);
    }
    if (before != nullptr &&
        (r.arrival_seconds < before->arrival_seconds || r.arrival_step < before->arrival_step))
      f.fail("arrivals must not decrease from one line to the next: sort the requests by arrival");
    out.push_back(std::move(r));
  }
  if (out.empty()) throw InputError(fmt::format("--workload: '{}' holds no request", name));
  return out;
}

std::vector<Request> load_workload(const std::string& path, const ModelConfig& c,
                                   const Tokenizer* tok, int default_max_new_tokens) {
  const std::string text = read_regular_file(
      path, "--workload file", "a JSONL file with one request per line", kMaxWorkloadBytes);
  return parse_workload(text, path, c, tok, default_max_new_tokens);
}

std::string workload_line(const Request& r) {
  nlohmann::json j = {{"prompt_ids", r.prompt}, {"max_new_tokens", r.max_new_tokens}};
  if (!r.stop_ids.empty()) j["stop_ids"] = r.stop_ids;
  if (r.arrival_seconds >= 0) {
    j["arrival_s"] = r.arrival_seconds;
  } else if (r.arrival_step > 0) {
    j["arrival_step"] = r.arrival_step;
  }
  return j.dump();
}

}  // namespace kvheap
