// Presets, validation and KV arithmetic for ModelConfig.
#include "common/model/model_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "base/error.hpp"

namespace kvheap {

namespace {

struct Preset {
  const char* name;
  const char* what;
  ModelConfig config;
};

ModelConfig make(const char* name, int dim, int hidden, int layers, int heads, int kv_heads,
                 int head_dim, int vocab, int max_seq, float theta, float eps, bool tied) {
  ModelConfig c;
  c.name = name;
  c.dim = dim;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.vocab_size = vocab;
  c.max_seq_len = max_seq;
  c.rope_theta = theta;
  c.norm_eps = eps;
  c.tied_embeddings = tied;
  return c;
}

// Real configurations are copied from each model's published config.json; synthetic ones are
// shapes only (weights come from a seed).
std::vector<Preset> build_presets() {
  std::vector<Preset> p;
  p.push_back({"tiny", "synthetic, for fast tests (GQA group 2)",
               make("tiny", 64, 160, 2, 4, 2, 16, 128, 96, 10000.0f, 1e-5f, true)});
  p.push_back({"stories260k", "shape of the stories260K TinyStories checkpoint",
               make("stories260k", 64, 172, 5, 8, 4, 8, 512, 512, 10000.0f, 1e-5f, true)});
  p.push_back({"stories15m", "shape of the stories15M TinyStories checkpoint",
               make("stories15m", 288, 768, 6, 6, 6, 48, 32000, 256, 10000.0f, 1e-5f, true)});
  p.push_back({"stories110m", "shape of the stories110M TinyStories checkpoint",
               make("stories110m", 768, 2048, 12, 12, 12, 64, 32000, 1024, 10000.0f, 1e-5f, true)});
  {
    ModelConfig c =
        make("llama-3.2-1b", 2048, 8192, 16, 32, 8, 64, 128256, 131072, 500000.0f, 1e-5f, true);
    c.rope_scaling = {true, 32.0f, 1.0f, 4.0f, 8192};
    p.push_back({"llama-3.2-1b", "Meta Llama 3.2 1B", c});
  }
  p.push_back(
      {"llama-3-8b", "Meta Llama 3 8B",
       make("llama-3-8b", 4096, 14336, 32, 32, 8, 128, 128256, 8192, 500000.0f, 1e-5f, false)});
  p.push_back(
      {"llama-3-8b-4l", "Llama 3 8B shape with 4 layers (synthetic, for GPU benchmarks)",
       make("llama-3-8b-4l", 4096, 14336, 4, 32, 8, 128, 128256, 8192, 500000.0f, 1e-5f, false)});
  p.push_back(
      {"llama-3-70b", "Meta Llama 3 70B",
       make("llama-3-70b", 8192, 28672, 80, 64, 8, 128, 128256, 8192, 500000.0f, 1e-5f, false)});
  p.push_back(
      {"mistral-7b", "Mistral 7B v0.1",
       make("mistral-7b", 4096, 14336, 32, 32, 8, 128, 32000, 32768, 10000.0f, 1e-5f, false)});
  {
    ModelConfig c =
        make("qwen2.5-7b", 3584, 18944, 28, 28, 4, 128, 152064, 32768, 1000000.0f, 1e-6f, false);
    c.attention_bias = true;
    p.push_back({"qwen2.5-7b", "Qwen2.5 7B (attention biases)", c});
  }
  {
    // Qwen/Qwen3-0.6B's config.json: hidden_size 1024, intermediate_size 3072, 28 layers, 16 heads
    // over 8 KV heads of head_dim 128 (so q_dim 2048 is twice hidden_size), vocab_size 151936,
    // max_position_embeddings 40960, rope_theta 1000000, rms_norm_eps 1e-6, tied embeddings.
    ModelConfig c =
        make("qwen3-0.6b", 1024, 3072, 28, 16, 8, 128, 151936, 40960, 1000000.0f, 1e-6f, true);
    c.qk_norm = true;
    p.push_back({"qwen3-0.6b", "Qwen3 0.6B (per-head q/k RMSNorm, head_dim 128)", c});
  }
  for (auto& e : p) {
    // Real Hugging Face checkpoints rotate halves; synthetic and llama2.c shapes rotate pairs.
    const std::string n = e.name;
    const bool hf =
        n.rfind("llama-", 0) == 0 || n.rfind("mistral", 0) == 0 || n.rfind("qwen", 0) == 0;
    e.config.rope_style = hf ? RopeStyle::Halves : RopeStyle::Interleaved;
  }
  return p;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = build_presets();
  return p;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw InputError("invalid model config: " + what);
}

void validate_rope_scaling(const RopeScaling& s) {
  const bool finite = std::isfinite(s.factor) && std::isfinite(s.high_freq_factor);
  require(finite && s.factor >= 1.0f && s.low_freq_factor > 0.0f &&
              s.high_freq_factor > s.low_freq_factor && s.original_max_position > 0,
          fmt::format("llama3 rope_scaling needs finite factors with factor >= 1, 0 < "
                      "low_freq_factor < high_freq_factor and original_max_position_embeddings "
                      "> 0; got factor {}, low_freq_factor {}, high_freq_factor {}, "
                      "original_max_position_embeddings {}",
                      s.factor, s.low_freq_factor, s.high_freq_factor, s.original_max_position));
}

}  // namespace

std::int64_t ModelConfig::num_parameters() const {
  const std::int64_t d = dim, h = hidden_dim, q = q_dim(), kv = kv_dim();
  std::int64_t per_layer = 2 * d + d * q + 2 * d * kv + q * d + 3 * d * h;
  if (attention_bias) per_layer += q + 2 * kv;
  if (qk_norm) per_layer += 2 * std::int64_t{head_dim};  // one gain per head dimension for q and k
  std::int64_t n = std::int64_t{vocab_size} * d + n_layers * per_layer + d;
  if (!tied_embeddings) n += std::int64_t{vocab_size} * d;
  return n;
}

void ModelConfig::validate() const {
  // Upper bounds are far above any real model; they exist to reject garbage headers before
  // they turn into multi-terabyte allocations.
  require(dim > 0 && dim <= 65536, fmt::format("dim must be in [1, 65536], got {}", dim));
  require(hidden_dim > 0 && hidden_dim <= 262144,
          fmt::format("hidden_dim must be in [1, 262144], got {}", hidden_dim));
  require(n_layers > 0 && n_layers <= 1024,
          fmt::format("n_layers must be in [1, 1024], got {}", n_layers));
  require(n_heads > 0 && n_heads <= 1024,
          fmt::format("n_heads must be in [1, 1024], got {}", n_heads));
  require(n_kv_heads > 0 && n_kv_heads <= n_heads,
          fmt::format("n_kv_heads must be in [1, n_heads={}], got {}", n_heads, n_kv_heads));
  require(n_heads % n_kv_heads == 0,
          fmt::format("n_heads ({}) must be divisible by n_kv_heads ({})", n_heads, n_kv_heads));
  require(head_dim > 0 && head_dim <= 1024,
          fmt::format("head_dim must be in [1, 1024], got {}", head_dim));
  require(head_dim % 2 == 0, fmt::format("head_dim must be even for RoPE, got {}", head_dim));
  require(vocab_size > 0 && vocab_size <= 4'000'000,
          fmt::format("vocab_size must be in [1, 4000000], got {}", vocab_size));
  require(max_seq_len > 0 && max_seq_len <= 4'194'304,
          fmt::format("max_seq_len must be in [1, 4194304], got {}", max_seq_len));
  // An infinite theta turns every RoPE frequency into 0 or NaN and the model still runs: a silent
  // wrong answer, so finiteness is checked along with the sign.
  require(std::isfinite(rope_theta) && rope_theta > 0.0f,
          fmt::format("rope_theta must be a finite positive number, got {}", rope_theta));
  require(norm_eps > 0.0f && norm_eps < 1.0f,
          fmt::format("norm_eps must be in (0, 1), got {}", norm_eps));
  require(bos_id >= 0 && bos_id < vocab_size,
          fmt::format("bos_id must be in [0, vocab_size={}), got {}", vocab_size, bos_id));
  for (int s : stop_ids)
    require(s >= 0 && s < vocab_size,
            fmt::format("stop token id must be in [0, vocab_size={}), got {}", vocab_size, s));
  if (rope_scaling.enabled) validate_rope_scaling(rope_scaling);
  require(rope_freq_factors.empty() ||
              rope_freq_factors.size() == static_cast<std::size_t>(head_dim / 2),
          fmt::format("rope_freq_factors must hold head_dim/2 = {} values, got {}", head_dim / 2,
                      rope_freq_factors.size()));
  for (const float f : rope_freq_factors)
    require(std::isfinite(f) && f > 0.0f,
            fmt::format("rope_freq_factors must be finite and positive, got {}", f));
  require(rope_freq_factors.empty() || !rope_scaling.enabled,
          "rope_freq_factors and rope_scaling are two ways to scale RoPE; give one");
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.emplace_back(p.name);
  return names;
}

bool is_preset(std::string_view name) {
  return std::any_of(presets().begin(), presets().end(),
                     [&](const Preset& p) { return name == p.name; });
}

ModelConfig preset(std::string_view name) {
  for (const auto& p : presets())
    if (name == p.name) return p.config;
  throw UsageError(fmt::format("unknown model preset '{}': expected one of {}", name,
                               fmt::join(preset_names(), ", ")));
}

std::string describe(const ModelConfig& c) {
  return fmt::format(
      "model {}: dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, head_dim {}, "
      "vocab_size {}, max_seq_len {}, rope_theta {}, norm_eps {}, tied_embeddings {}, "
      "rope {}{}{}{}, parameters {:.1f}M",
      c.name, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size,
      c.max_seq_len, c.rope_theta, c.norm_eps, c.tied_embeddings,
      c.rope_style == RopeStyle::Interleaved ? "interleaved" : "halves",
      c.rope_scaling.enabled ? fmt::format(" (llama3 scaling x{})", c.rope_scaling.factor) : "",
      c.attention_bias ? ", qkv bias" : "", c.qk_norm ? ", q/k norm" : "",
      static_cast<double>(c.num_parameters()) / 1e6);
}

std::size_t kv_bytes_per_token(const ModelConfig& c, DType kv) {
  return 2 * static_cast<std::size_t>(c.n_layers) * c.n_kv_heads * c.head_dim * dtype_size(kv);
}

std::size_t kv_bytes_for_context(const ModelConfig& c, DType kv, std::int64_t tokens) {
  return kv_bytes_per_token(c, kv) * static_cast<std::size_t>(tokens);
}

std::size_t weight_bytes(const ModelConfig& c, DType w) {
  return static_cast<std::size_t>(c.num_parameters()) * dtype_size(w);
}

}  // namespace kvheap
