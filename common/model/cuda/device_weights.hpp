// DeviceWeights: every tensor of a ModelWeights uploaded once to device memory.
//
// Matrices (the projections, the embedding table and the classifier) are stored in one chosen
// dtype: fp32, or fp16/bf16 to halve the bytes every decode step has to read. Norm gains and
// biases stay fp32: they are tiny and feed fp32 arithmetic. The narrowing happens on the host
// with base/half.hpp (round to nearest even) through a fixed-size staging buffer, so uploading
// a model never holds a second full copy of it in host memory.
#pragma once

#include <cstddef>
#include <vector>

#include "common/model/model_config.hpp"
#include "common/model/weights.hpp"
#include "device/buffers.hpp"

namespace kvheap {

/// \brief A row-major [rows, cols] matrix in device memory, stored as `dtype`.
struct DeviceMatrix {
  DeviceBuffer<std::byte> storage;  ///< [rows, cols] elements of dtype (float/__half/__nv_bfloat16)
  DType dtype = DType::F32;         ///< element type
  int rows = 0;                     ///< out_features (or vocabulary entries)
  int cols = 0;                     ///< in_features (or dim)

  /// \brief Device pointer to element (0, 0), for the GEMM and the embedding gather.
  [[nodiscard]] const void* data() const noexcept { return storage.data(); }
};

/// \brief One transformer block's tensors in device memory.
struct DeviceLayerWeights {
  DeviceBuffer<float> attn_norm;  ///< [dim]
  DeviceMatrix wq;                ///< [q_dim, dim]
  DeviceMatrix wk;                ///< [kv_dim, dim]
  DeviceMatrix wv;                ///< [kv_dim, dim]
  DeviceMatrix wo;                ///< [dim, q_dim]
  DeviceBuffer<float> bq;         ///< [q_dim], empty without attention biases
  DeviceBuffer<float> bk;         ///< [kv_dim], empty without attention biases
  DeviceBuffer<float> bv;         ///< [kv_dim], empty without attention biases
  DeviceBuffer<float> q_norm;     ///< [head_dim] per-head q gain, empty without q/k norms
  DeviceBuffer<float> k_norm;     ///< [head_dim] per-head k gain, empty without q/k norms
  DeviceBuffer<float> ffn_norm;   ///< [dim]
  DeviceMatrix w1;                ///< [hidden_dim, dim] gate projection
  DeviceMatrix w2;                ///< [dim, hidden_dim] down projection
  DeviceMatrix w3;                ///< [hidden_dim, dim] up projection
};

/// \brief The model's weights in device memory; owns them (RAII) and is move-only.
class DeviceWeights {
 public:
  /// \brief Uploads every tensor of `weights`, matrices narrowed to `matrix_dtype`.
  ///
  /// Throws InputError when a tensor the config needs is missing, ResourceError when device
  /// memory runs out. `weights` is not referenced afterwards.
  DeviceWeights(const ModelWeights& weights, DType matrix_dtype);

  /// \brief The shape of the model.
  [[nodiscard]] const ModelConfig& config() const noexcept { return config_; }
  /// \brief The dtype of every matrix.
  [[nodiscard]] DType matrix_dtype() const noexcept { return dtype_; }
  /// \brief [vocab_size, dim] token embedding table.
  [[nodiscard]] const DeviceMatrix& token_embedding() const noexcept { return embedding_; }
  /// \brief [vocab_size, dim] classifier; the embedding table itself when the two are tied.
  [[nodiscard]] const DeviceMatrix& classifier() const noexcept {
    return tied_ ? embedding_ : classifier_;
  }
  /// \brief True when the classifier shares the embedding table (uploaded once).
  [[nodiscard]] bool tied() const noexcept { return tied_; }
  /// \brief [dim] gain of the final RMSNorm.
  [[nodiscard]] const DeviceBuffer<float>& final_norm() const noexcept { return final_norm_; }
  /// \brief Block `l`'s tensors, 0 <= l < n_layers.
  [[nodiscard]] const DeviceLayerWeights& layer(int l) const { return layers_.at(l); }
  /// \brief Bytes of device memory the weights occupy (what was uploaded).
  [[nodiscard]] std::size_t bytes_uploaded() const noexcept { return bytes_; }

 private:
  ModelConfig config_;
  DType dtype_;
  bool tied_ = false;
  DeviceMatrix embedding_;                  // [vocab_size, dim]
  DeviceMatrix classifier_;                 // [vocab_size, dim]; empty when tied
  DeviceBuffer<float> final_norm_;          // [dim]
  std::vector<DeviceLayerWeights> layers_;  // [n_layers]
  std::size_t bytes_ = 0;
};

}  // namespace kvheap
