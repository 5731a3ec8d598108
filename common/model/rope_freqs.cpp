#include "common/model/rope_freqs.hpp"

#include <cmath>
#include <numbers>

namespace kvheap {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i)
    inv[i] =
        1.0f / std::pow(c.rope_theta, static_cast<float>(2 * i) / static_cast<float>(c.head_dim));
  // A GGUF file's per-frequency factors (Llama 3.1's scaling, computed by its converter).
  for (std::size_t i = 0; i < c.rope_freq_factors.size() && i < inv.size(); ++i)
    inv[i] /= c.rope_freq_factors[i];
  if (!c.rope_scaling.enabled) return inv;
  // Llama 3: leave short wavelengths (local detail) alone, stretch long ones by `factor`, and blend
  // smoothly in between, so the model reaches past the context it was trained on.
  const RopeScaling& s = c.rope_scaling;
  const float orig = static_cast<float>(s.original_max_position);
  const float low_wavelen = orig / s.low_freq_factor;
  const float high_wavelen = orig / s.high_freq_factor;
  for (float& f : inv) {
    const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f /= s.factor;
    } else {
      const float smooth =
          (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1.0f - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv;
}

}  // namespace kvheap
