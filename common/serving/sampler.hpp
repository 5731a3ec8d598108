// Sampler: picks the next token from the model's logits, greedily or by temperature and nucleus
// (top-p) sampling, reproducibly for a given seed.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <span>

#include "base/dtype.hpp"
#include "kernels/sample.hpp"

namespace kvheap {

/// \brief How to choose the next token. Defaults match llama2.c's run.c.
struct SamplerConfig {
  float temperature = 1.0f;  ///< 0 means greedy; higher flattens the distribution
  float top_p = 0.9f;        ///< nucleus mass in (0, 1]; 1 samples from the full distribution
  std::uint64_t seed = 42;   ///< same seed, same logits -> same tokens, on every platform

  /// \brief Throws UsageError naming --temperature or --top-p and its valid range.
  void validate() const;
};

/// \brief Index of the largest logit; ties go to the lowest index.
///
/// Throws InputError when `logits` is empty or holds a NaN.
[[nodiscard]] int argmax(std::span<const float> logits);

/// \brief (best - second best) / max |logit| of a row of logits, the best being argmax's pick: how
/// far greedy decoding is from picking another token (0 for an all-zero row).
[[nodiscard]] float top2_gap(std::span<const float> logits);

/// \brief The top2_gap below which two computations of the same logits may pick different greedy
/// tokens. In fp32 they differ only in how sums are ordered (1e-4 covers that); a 16-bit cache or
/// weights round every K, V or weight to 8 (bf16) or 11 (fp16) bits, so a last-bit difference
/// before the rounding becomes a whole unit after it, on every later token (1e-2, 2e-3).
[[nodiscard]] float near_tie(DType weights, DType kv);

/// \brief A request's sampler: its configuration and its seeded random stream. It draws one
/// uniform number per token it samples; where the logits are (host, or a GPU) the rule of
/// kernels/sample.hpp turns that number into a token, so the same seed gives the same tokens on
/// every backend, up to near ties of the sampled distribution.
class Sampler {
 public:
  /// \brief Validates `config` (UsageError) and seeds the generator.
  explicit Sampler(SamplerConfig config);

  /// \brief The job that chooses this request's next token from logit row `row` of a pass: greedy
  /// (temperature 0), or a draw with the next number of the stream.
  [[nodiscard]] SamplingJob job(int row);

  /// \brief The next token id for `logits` (one per vocabulary entry), on the host: job(0) over
  /// them. Throws InputError when `logits` is empty or holds NaN, or +inf or only -inf for a draw.
  [[nodiscard]] int sample(std::span<const float> logits);

  /// \brief The configuration this sampler was built with.
  [[nodiscard]] const SamplerConfig& config() const { return config_; }

 private:
  float next_unit();

  SamplerConfig config_;
  // mt19937_64's output sequence is fixed by the standard; the distributions are not, so we turn
  // raw output into floats ourselves.
  std::mt19937_64 rng_;
};

/// \brief `t`'s token, or InputError for its error code (a NaN logit, +inf, nothing allowed),
/// naming `where` ("the logits of request 3"), and `logits`' first bad index when given.
int checked_token(const SampledToken& t, const std::string& where,
                  std::span<const float> logits = {});

}  // namespace kvheap
