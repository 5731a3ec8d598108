// ModelConfig: the shape of a Llama-family decoder, its named presets, and KV-cache arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.hpp"

namespace kvheap {

/// \brief How RoPE pairs the dimensions of a head.
///
/// llama2.c checkpoints rotate interleaved pairs (2i, 2i+1). Hugging Face Llama checkpoints rotate
/// halves (i, i + head_dim/2), because their q and k projections were permuted on conversion. The
/// loader records which one a checkpoint uses and the forward pass applies it.
enum class RopeStyle { Interleaved, Halves };

/// \brief Llama 3 style frequency scaling of RoPE ("rope_scaling": {"rope_type": "llama3"}).
struct RopeScaling {
  bool enabled = false;              ///< false: plain RoPE
  float factor = 1.0f;               ///< overall stretch of long wavelengths
  float low_freq_factor = 1.0f;      ///< wavelengths above original/low are stretched fully
  float high_freq_factor = 1.0f;     ///< wavelengths below original/high are left alone
  int original_max_position = 8192;  ///< context the model was pre-trained with
};

/// \brief Hyper-parameters of a Llama-family decoder-only transformer.
struct ModelConfig {
  std::string name = "unnamed";  ///< preset or checkpoint name, for reports
  int dim = 0;                   ///< residual stream width
  int hidden_dim = 0;            ///< SwiGLU inner width
  int n_layers = 0;              ///< transformer blocks
  int n_heads = 0;               ///< query heads
  int n_kv_heads = 0;            ///< key/value heads (grouped-query attention when < n_heads)
  int head_dim = 0;              ///< per-head width; usually dim / n_heads
  int vocab_size = 0;            ///< tokens the embedding and classifier cover
  int max_seq_len = 0;           ///< longest context the model accepts
  float rope_theta = 10000.0f;   ///< RoPE base frequency
  float norm_eps = 1e-5f;        ///< RMSNorm epsilon
  bool tied_embeddings = true;   ///< classifier shares the token-embedding matrix
  bool attention_bias = false;   ///< q/k/v projections carry biases (Qwen2)
  bool qk_norm = false;          ///< per-head RMSNorm of q and k before RoPE (Qwen3)
  RopeStyle rope_style = RopeStyle::Interleaved;  ///< which dimensions RoPE pairs
  RopeScaling rope_scaling;                       ///< llama3 frequency scaling, if any
  /// Per-frequency divisors of RoPE's inverse frequencies, [head_dim/2], as a GGUF file of Llama
  /// 3.1 stores its long-context scaling (rope_freqs.weight); empty for none.
  std::vector<float> rope_freq_factors;
  int bos_id = 1;                   ///< beginning-of-sequence token
  std::vector<int> stop_ids = {1};  ///< token ids that end generation (llama2.c: BOS)

  /// \brief Query width: n_heads * head_dim.
  [[nodiscard]] int q_dim() const { return n_heads * head_dim; }
  /// \brief Key/value width: n_kv_heads * head_dim.
  [[nodiscard]] int kv_dim() const { return n_kv_heads * head_dim; }
  /// \brief Query heads that share one KV head.
  [[nodiscard]] int group_size() const { return n_heads / n_kv_heads; }

  /// \brief Number of parameters (weights), counting a tied classifier once.
  [[nodiscard]] std::int64_t num_parameters() const;

  /// \brief Throws InputError naming the first impossible field (heads that do not divide, odd
  /// head_dim, non-positive or absurd sizes, a rope_theta, norm_eps or rope_scaling factor that is
  /// infinite, NaN or out of range).
  void validate() const;
};

/// \brief Names of the built-in presets, in display order.
[[nodiscard]] std::vector<std::string> preset_names();
/// \brief True when `name` is a built-in preset.
[[nodiscard]] bool is_preset(std::string_view name);
/// \brief The preset's configuration; throws UsageError listing the valid names otherwise.
[[nodiscard]] ModelConfig preset(std::string_view name);
/// \brief One line per field, for `--print-config` style output.
[[nodiscard]] std::string describe(const ModelConfig& c);

// ---- KV arithmetic ------------------------------------------------------------------------------

/// \brief Bytes of K and V for one token across all layers:
/// 2 (K and V) x n_layers x n_kv_heads x head_dim x bytes per element.
[[nodiscard]] std::size_t kv_bytes_per_token(const ModelConfig& c, DType kv);
/// \brief Bytes of K and V for `tokens` tokens of one sequence.
[[nodiscard]] std::size_t kv_bytes_for_context(const ModelConfig& c, DType kv, std::int64_t tokens);
/// \brief Bytes of all weights stored in `w`.
[[nodiscard]] std::size_t weight_bytes(const ModelConfig& c, DType w);

}  // namespace kvheap
