// Greedy, temperature and nucleus sampling over a logits vector.
#include "common/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

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
  return scale > 0 ? (logits[best] - second) / scale : 0.0f;
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

int Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) throw InputError("cannot sample a token from an empty logits vector");
  float max_logit = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < logits.size(); ++i) {
    // -inf is a legitimate mask; NaN and +inf would turn the softmax into NaN everywhere.
    if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity()) {
      throw InputError(
          fmt::format("logit {} of {} is {}: the forward pass produced an invalid "
                      "value",
                      i, logits.size(), std::isnan(logits[i]) ? "NaN" : "+inf"));
    }
    max_logit = std::max(max_logit, logits[i]);
  }
  if (max_logit == -std::numeric_limits<float>::infinity()) {
    throw InputError("every logit is -inf: no token is allowed, so none can be sampled");
  }
  if (config_.temperature == 0.0f) return argmax(logits);

  // Subtracting the maximum before dividing keeps every exponent <= 0: no overflow even for a
  // temperature so small that logits / temperature alone would be infinite.
  probs_.resize(logits.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    probs_[i] = std::exp((logits[i] - max_logit) / config_.temperature);
    sum += probs_[i];
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (float& p : probs_) p *= inv;

  const float u = next_unit();
  return config_.top_p < 1.0f ? sample_nucleus(u) : sample_full(u);
}

int Sampler::sample_full(float u) const {
  double cdf = 0.0;
  int last_possible = 0;
  for (std::size_t i = 0; i < probs_.size(); ++i) {
    if (probs_[i] <= 0.0f) continue;
    cdf += probs_[i];
    last_possible = static_cast<int>(i);
    if (u < cdf) return last_possible;
  }
  // Rounding left the cdf a hair below u; the last token that can occur is the right answer,
  // never a masked one.
  return last_possible;
}

int Sampler::sample_nucleus(float u) {
  const std::size_t n = probs_.size();
  if (n == 1) return 0;
  // A token below (1 - top_p) / (n - 1) can never be in the nucleus: even all n - 1 others of
  // that size sum to less than 1 - top_p, so the tokens above the cutoff already hold more than
  // top_p. Dropping them first means sorting dozens of candidates instead of the whole vocabulary.
  const float cutoff = (1.0f - config_.top_p) / static_cast<float>(n - 1);
  nucleus_.clear();
  for (std::size_t i = 0; i < n; ++i) {
    if (probs_[i] >= cutoff && probs_[i] > 0.0f) {
      nucleus_.emplace_back(probs_[i], static_cast<int>(i));
    }
  }
  if (nucleus_.empty()) {
    // Only float rounding can get here; the most likely token is always in the nucleus.
    const auto top = std::max_element(probs_.begin(), probs_.end());
    nucleus_.emplace_back(*top, static_cast<int>(top - probs_.begin()));
  }
  // Ties broken by id make the order a total one, so every standard library sorts the same way.
  std::sort(nucleus_.begin(), nucleus_.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });

  // The nucleus is the shortest prefix whose mass exceeds top_p (at least one token).
  double mass = 0.0;
  std::size_t last = nucleus_.size() - 1;
  for (std::size_t i = 0; i < nucleus_.size(); ++i) {
    mass += nucleus_[i].first;
    if (mass > config_.top_p) {
      last = i;
      break;
    }
  }

  // Renormalising the nucleus is the same as scaling the draw by its mass.
  const double target = static_cast<double>(u) * mass;
  double cdf = 0.0;
  for (std::size_t i = 0; i <= last; ++i) {
    cdf += nucleus_[i].first;
    if (target < cdf) return nucleus_[i].second;
  }
  return nucleus_[last].second;
}

}  // namespace kvheap
