// Greedy, temperature and nucleus sampling over a logits vector.
#include "common/serving/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "base/error.hpp"

namespace kvheap {

void SamplerConfig::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    throw UsageError(
        fmt::format("--temperature must be a finite number >= 0 (0 always picks the "
                    "most likely token); got {}",
                    temperature));
  }
  // Written as a negated range test so that NaN fails it too.
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    throw UsageError(
        fmt::format("--top-p must be in (0, 1] (1 samples from the full "
                    "distribution); got {}",
                    top_p));
  }
}

int argmax(std::span<const float> logits) {
  if (logits.empty()) throw InputError("cannot pick a token from an empty logits vector");
  std::size_t best = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) {
      throw InputError(
          fmt::format("logit {} of {} is NaN: the forward pass produced an invalid "
                      "value",
                      i, logits.size()));
    }
    if (logits[i] > logits[best]) best = i;  // strict >: the first of equal maxima wins
  }
  return static_cast<int>(best);
}

float top2_gap(std::span<const float> logits) {
  const int best = argmax(logits);
  float second = -std::numeric_limits<float>::infinity(), scale = 0.0f;
  for (std::size_t v = 0; v < logits.size(); ++v) {
    if (static_cast<int>(v) != best) second = std::max(second, logits[v]);
    scale = std::max(scale, std::fabs(logits[v]));
  }
  return top2_gap(SampledToken{best, logits[static_cast<std::size_t>(best)], second, scale});
}

float near_tie(DType weights, DType kv) {
  const auto coarse = [](DType t) {
    return t == DType::BF16 ? 1e-2f : t == DType::F16 ? 2e-3f : 1e-4f;
  };
  return std::max(coarse(weights), coarse(kv));
}

Sampler::Sampler(SamplerConfig config) : config_(config), rng_(config.seed) { config_.validate(); }

float Sampler::next_unit() {
  // The top 24 bits fill a float's mantissa exactly, so every value k * 2^-24 is representable
  // and the result is strictly below 1.
  return static_cast<float>(rng_() >> 40) * 0x1p-24f;
}

SamplingJob Sampler::job(int row) {
  if (config_.temperature == 0.0f) return {row, 0.0f, 1.0f, 0.0f};
  return draw_job(row, config_.temperature, config_.top_p, next_unit());
}

int Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) throw InputError("cannot sample a token from an empty logits vector");
  const SamplingJob j = job(0);
  SampledToken t;
  cpu::sample_rows(&t, logits.data(), 1, static_cast<int>(logits.size()), &j, 1);
  return checked_token(t, "the logits", logits);
}

int checked_token(const SampledToken& t, const std::string& where, std::span<const float> logits) {
  if (t.token >= 0) return t.token;
  // The first offending index, when the logits are at hand.
  std::string at;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const bool nan = std::isnan(logits[i]);
    if (nan || (t.token == SampledToken::kInfLogit && logits[i] == INFINITY)) {
      at = fmt::format(" (logit {} of {} is {})", i, logits.size(), nan ? "NaN" : "+inf");
      break;
    }
  }
  switch (t.token) {
    case SampledToken::kNaNLogit:
      throw InputError(
          fmt::format("{} hold a NaN{}: the forward pass produced an invalid value", where, at));
    case SampledToken::kInfLogit:
      throw InputError(fmt::format(
          "{} hold +inf{}: the forward pass produced an invalid value, and no draw is defined",
          where, at));
    case SampledToken::kNoTokenAllowed:
      throw InputError(fmt::format(
          "every one of {} is -inf: no token is allowed, so none can be sampled", where));
    default: throw std::logic_error(fmt::format("unknown sampling code {}", t.token));
  }
}

}  // namespace kvheap
