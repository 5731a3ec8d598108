// The generation loop shared by the single-sequence chapters: prefill the prompt as one batch,
// then decode one token per step until a stop token, the token limit or the context's end.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/forward_cpu.hpp"
#include "common/sampler.hpp"

namespace kvheap {

/// \brief What to generate and how to pick tokens.
struct GenerationConfig {
  int max_new_tokens = 64;  ///< at most this many tokens are generated
  SamplerConfig sampling;   ///< greedy, temperature, top-p, seed
  bool ignore_eos = false;  ///< generate exactly max_new_tokens (for benchmarks)
};

/// \brief Tokens and timings of one generation.
struct GenerationResult {
  std::vector<int> prompt;          ///< the prompt's token ids
  std::vector<int> generated;       ///< without the prompt and without the stop token
  std::string stop_reason;          ///< "stop token", "max_new_tokens"
  double prefill_seconds = 0.0;     ///< the prompt's forward pass
  double decode_seconds = 0.0;      ///< every later forward pass plus sampling
  int decode_steps = 0;             ///< forward passes after the prefill
  std::int64_t decode_context = 0;  ///< sum over decode steps of positions attended (pos + 1)
};

/// \brief Checks a prompt and token budget against the model's context; throws InputError for an
/// empty or too-long prompt and UsageError when --max-new-tokens runs past the context.
void check_generation_fits(std::size_t prompt_tokens, int max_new_tokens, const ModelConfig& c);

/// \brief Positions a generation of up to `max_new_tokens` after a prompt of `prompt_tokens`
/// stores at most: prompt + new - 1, since the last token generated is never fed back; 0 when
/// nothing is generated (the prompt is not even run then).
long positions_stored(std::size_t prompt_tokens, int max_new_tokens);

/// \brief Takes a sampled token into `generated` unless it ends the sequence. Returns
/// "stop token" (not added) for one of the model's stop ids when they are not ignored,
/// "max_new_tokens" (added) for the last token allowed, and "" (added) when the sequence goes on.
std::string take_token(int token, const ModelConfig& c, const GenerationConfig& gen,
                       std::vector<int>& generated);

/// \brief A forward pass over one batch, whatever the backend; returns the wanted rows' logits.
using ForwardFn = std::function<std::span<const float>(const Batch&)>;

/// \brief A forward pass that also picks the next token of the batch's last logit row (lets a GPU
/// backend take the argmax on the device instead of copying the logits back).
using NextTokenFn = std::function<int(const Batch&)>;

/// \brief Runs prefill then decode for the sequence in `slot`, choosing tokens with `next_token`;
/// `on_token` sees each new token. `gen.sampling` is not used.
GenerationResult generate_with(const NextTokenFn& next_token, const ModelConfig& config, int slot,
                               std::span<const int> prompt, const GenerationConfig& gen,
                               const std::function<void(int)>& on_token = {});

/// \brief Runs prefill then decode for the sequence in `slot`, sampling with `gen.sampling`;
/// `on_token` sees each new token.
GenerationResult generate(const ForwardFn& forward, const ModelConfig& config, int slot,
                          std::span<const int> prompt, const GenerationConfig& gen,
                          const std::function<void(int)>& on_token = {});

/// \brief The CPU variant: forward passes through `fwd` over `cache`.
GenerationResult generate(CpuForward& fwd, KVCache& cache, int slot, std::span<const int> prompt,
                          const GenerationConfig& gen,
                          const std::function<void(int)>& on_token = {});

}  // namespace kvheap
