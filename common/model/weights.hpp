// ModelWeights: fp32 views of every tensor of a Llama-family decoder, and what keeps them alive.
//
// Loaders fill the pointers; the backing memory is either a memory-mapped file (llama2.c fp32
// checkpoints are used in place) or vectors the loader converted into (fp16/bf16 safetensors,
// synthetic weights). Matrices are row-major [out_features, in_features], as both llama2.c and
// PyTorch store them, so y = W x reads each row once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/model/model_config.hpp"

namespace kvheap {

/// \brief One transformer block's tensors (fp32, row-major).
struct LayerWeights {
  const float* attn_norm = nullptr;  ///< [dim] RMSNorm gain before attention
  const float* wq = nullptr;         ///< [q_dim, dim]
  const float* wk = nullptr;         ///< [kv_dim, dim]
  const float* wv = nullptr;         ///< [kv_dim, dim]
  const float* wo = nullptr;         ///< [dim, q_dim]
  const float* bq = nullptr;         ///< [q_dim] or null (Qwen2 has q/k/v biases)
  const float* bk = nullptr;         ///< [kv_dim] or null
  const float* bv = nullptr;         ///< [kv_dim] or null
  const float* q_norm = nullptr;     ///< [head_dim] RMSNorm gain of each q head, or null (Qwen3)
  const float* k_norm = nullptr;     ///< [head_dim] RMSNorm gain of each k head, or null (Qwen3)
  const float* ffn_norm = nullptr;   ///< [dim] RMSNorm gain before the MLP
  const float* w1 = nullptr;         ///< [hidden_dim, dim] gate projection
  const float* w2 = nullptr;         ///< [dim, hidden_dim] down projection
  const float* w3 = nullptr;         ///< [hidden_dim, dim] up projection
};

/// \brief Every tensor of the model plus the storage that owns them.
struct ModelWeights {
  ModelConfig config;                      ///< the shape these tensors have
  const float* token_embedding = nullptr;  ///< [vocab_size, dim]
  std::vector<LayerWeights> layers;        ///< [n_layers]
  const float* final_norm = nullptr;       ///< [dim]
  const float* classifier = nullptr;       ///< [vocab_size, dim]; == token_embedding when tied

  /// \brief Keeps the mapped file or converted buffers alive as long as the pointers are used.
  std::vector<std::shared_ptr<const void>> storage;

  /// \brief Hands back a zeroed fp32 buffer of `n` floats owned by this object.
  float* allocate(std::size_t n) {
    auto buf = std::make_shared<std::vector<float>>(n, 0.0f);
    float* p = buf->data();
    storage.push_back(std::move(buf));
    return p;
  }
};

}  // namespace kvheap
