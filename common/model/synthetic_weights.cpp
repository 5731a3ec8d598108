#include "common/model/synthetic_weights.hpp"

#include <cmath>

namespace kvheap {

namespace {

// SplitMix64 finaliser: a strong 64-bit mix, so (seed, tensor, i) -> independent-looking bits
// without any sequential RNG state.
std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Fills p[n] with uniform values in [-scale, scale].
void fill(float* p, long n, std::uint64_t seed, std::uint64_t tensor, float scale) {
  const std::uint64_t base = mix(seed ^ mix(tensor));
#pragma omp parallel for schedule(static) if (n >= (1L << 16))
  for (long i = 0; i < n; ++i) {
    const std::uint64_t bits = mix(base + static_cast<std::uint64_t>(i));
    const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = (2.0f * u - 1.0f) * scale;
  }
}

// A uniform [-a, a] variable has variance a^2/3; a = sqrt(3/fan_in) gives unit-variance outputs.
float fan_in_scale(int fan_in, float gain) {
  return gain * std::sqrt(3.0f / static_cast<float>(fan_in));
}

}  // namespace

ModelWeights make_synthetic_weights(const ModelConfig& config, std::uint64_t seed) {
  config.validate();
  ModelWeights w;
  w.config = config;
  const ModelConfig& c = w.config;
  const long d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim, V = c.vocab_size;
  std::uint64_t tensor = 0;
  auto make = [&](long n, float scale) {
    float* p = w.allocate(static_cast<std::size_t>(n));
    fill(p, n, seed, tensor++, scale);
    return p;
  };
  // Norm gains near 1 with a little spread, so a wrong gain index shows in the logits.
  auto ones = [&](long n, float spread = 0.1f) {
    float* p = w.allocate(static_cast<std::size_t>(n));
    fill(p, n, seed, tensor++, spread);
    for (long i = 0; i < n; ++i) p[i] += 1.0f;
    return p;
  };
  // Logits are x . e with |x| ~ sqrt(dim) after the final norm; an embedding scale of
  // 3/sqrt(dim) (uniform variance 3/dim) spreads logits with a standard deviation near 3.
  w.token_embedding = make(V * d, 3.0f / std::sqrt(static_cast<float>(d)));
  w.layers.resize(c.n_layers);
  for (auto& L : w.layers) {
    L.attn_norm = ones(d);
    L.wq = make(q * d, fan_in_scale(c.dim, 1.0f));
    L.wk = make(kv * d, fan_in_scale(c.dim, 1.0f));
    L.wv = make(kv * d, fan_in_scale(c.dim, 1.0f));
    // Residual branches are damped by depth so the stream does not grow layer over layer.
    const float branch = 1.0f / std::sqrt(2.0f * static_cast<float>(c.n_layers));
    L.wo = make(d * q, fan_in_scale(c.q_dim(), branch));
    if (c.attention_bias) {
      L.bq = make(q, 0.1f);
      L.bk = make(kv, 0.1f);
      L.bv = make(kv, 0.1f);
    }
    if (c.qk_norm) {
      // Gains from 0.5 to 1.5: they scale each dimension of q.k, so one applied to the wrong
      // dimension, or after RoPE instead of before, changes the attention clearly.
      L.q_norm = ones(c.head_dim, 0.5f);
      L.k_norm = ones(c.head_dim, 0.5f);
    }
    L.ffn_norm = ones(d);
    L.w1 = make(h * d, fan_in_scale(c.dim, 1.0f));
    L.w3 = make(h * d, fan_in_scale(c.dim, 1.0f));
    L.w2 = make(d * h, fan_in_scale(c.hidden_dim, 2.0f * branch));
  }
  w.final_norm = ones(d);
  w.classifier =
      c.tied_embeddings ? w.token_embedding : make(V * d, 3.0f / std::sqrt(static_cast<float>(d)));
  return w;
}

}  // namespace kvheap
