// The cache interface of the GPU forward pass: the same two questions as KVCache, with every
// tensor in device memory.
#pragma once

#include <cstddef>

#include "common/batch.hpp"

namespace kvheap {

/// \brief A KV-cache policy whose storage lives in device memory (a GPU, or the CPU simulator).
///
/// The forward pass calls prepare() once per batch, then write() and attend() once per layer.
/// prepare() is where a policy uploads what its kernels need to find each row's cache entries
/// (slot offsets, page tables), so that cost is paid once per batch, not once per layer.
class DeviceKVCache {
 public:
  virtual ~DeviceKVCache() = default;

  /// \brief Called before the layers of a forward pass over `batch` (host-side description).
  virtual void prepare(const Batch& batch) = 0;

  /// \brief Stores K and V of every batch row at (row.slot, row.pos) of `layer`.
  /// \param layer which transformer block, 0-based
  /// \param k [batch.size(), n_kv_heads * head_dim] fp32 device memory, RoPE applied
  /// \param v [batch.size(), n_kv_heads * head_dim] fp32 device memory
  virtual void write(int layer, const float* k, const float* v) = 0;

  /// \brief Causal attention of each row over its sequence's positions 0..row.pos.
  /// \param layer which transformer block, 0-based
  /// \param q   [batch.size(), n_heads * head_dim] fp32 device memory, RoPE applied
  /// \param out [batch.size(), n_heads * head_dim] fp32 device memory, written
  virtual void attend(int layer, const float* q, float* out) = 0;

  /// \brief Bytes of device memory the policy holds for K and V.
  [[nodiscard]] virtual std::size_t bytes_reserved() const = 0;
  /// \brief Bytes that hold a token's K or V.
  [[nodiscard]] virtual std::size_t bytes_used() const = 0;
};

}  // namespace kvheap
