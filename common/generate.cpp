#include "common/generate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "base/error.hpp"

namespace kvheap {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void check_generation_fits(std::size_t prompt_tokens, int max_new_tokens, const ModelConfig& c) {
  if (prompt_tokens == 0)
    throw InputError(
        "the prompt is empty: give --prompt text or --prompt-ids with at least one "
        "token (e.g. the BOS id 1)");
  if (prompt_tokens > static_cast<std::size_t>(c.max_seq_len))
    throw InputError(
        fmt::format("the prompt has {} tokens but the model's context holds {} "
                    "(max_seq_len); shorten the prompt",
                    prompt_tokens, c.max_seq_len));
  if (max_new_tokens < 0)
    throw UsageError(fmt::format("--max-new-tokens must be >= 0, got {}", max_new_tokens));
  // The last generated token is never fed back, so the context must hold prompt + new - 1.
  if (positions_stored(prompt_tokens, max_new_tokens) > c.max_seq_len) {
    const std::size_t room = static_cast<std::size_t>(c.max_seq_len) - prompt_tokens + 1;
    throw UsageError(
        fmt::format("--max-new-tokens {} runs past the context: the prompt uses {} of "
                    "{} positions, so at most {} new tokens fit",
                    max_new_tokens, prompt_tokens, c.max_seq_len, room));
  }
}

long positions_stored(std::size_t prompt_tokens, int max_new_tokens) {
  return max_new_tokens > 0 ? static_cast<long>(prompt_tokens) + max_new_tokens - 1 : 0;
}

std::string take_token(int token, const ModelConfig& c, const GenerationConfig& gen,
                       std::vector<int>& generated) {
  const bool is_stop = std::find(c.stop_ids.begin(), c.stop_ids.end(), token) != c.stop_ids.end();
  if (is_stop && !gen.ignore_eos) return "stop token";
  generated.push_back(token);
  return static_cast<int>(generated.size()) == gen.max_new_tokens ? "max_new_tokens" : "";
}

GenerationResult generate(const ForwardFn& forward, const ModelConfig& config, int slot,
                          std::span<const int> prompt, const GenerationConfig& gen,
                          const std::function<void(int)>& on_token) {
  Sampler sampler(gen.sampling);
  return generate_with([&](const Batch& b) { return sampler.sample(forward(b)); }, config, slot,
                       prompt, gen, on_token);
}

GenerationResult generate_with(const NextTokenFn& next_token, const ModelConfig& config, int slot,
                               std::span<const int> prompt, const GenerationConfig& gen,
                               const std::function<void(int)>& on_token) {
  check_generation_fits(prompt.size(), gen.max_new_tokens, config);
  GenerationResult res;
  res.prompt.assign(prompt.begin(), prompt.end());
  res.stop_reason = "max_new_tokens";
  if (gen.max_new_tokens == 0) return res;

  Batch batch;
  for (std::size_t i = 0; i < prompt.size(); ++i)
    batch.rows.push_back({prompt[i], slot, static_cast<int>(i), i + 1 == prompt.size()});
  auto t0 = std::chrono::steady_clock::now();
  int next = next_token(batch);
  res.prefill_seconds = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  while (true) {
    const std::string done = take_token(next, config, gen, res.generated);
    if (done != "stop token" && on_token) on_token(next);
    if (!done.empty()) {
      res.stop_reason = done;
      break;
    }
    const int pos = static_cast<int>(prompt.size() + res.generated.size()) - 1;
    batch.rows.assign(1, BatchRow{next, slot, pos, true});
    next = next_token(batch);
    ++res.decode_steps;
    res.decode_context += pos + 1;
  }
  res.decode_seconds = seconds_since(t0);
  return res;
}

GenerationResult generate(CpuForward& fwd, KVCache& cache, int slot, std::span<const int> prompt,
                          const GenerationConfig& gen, const std::function<void(int)>& on_token) {
  return generate([&](const Batch& b) { return fwd.forward(b, cache); }, fwd.weights().config, slot,
                  prompt, gen, on_token);
}

}  // namespace kvheap
