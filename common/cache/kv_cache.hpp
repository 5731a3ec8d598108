// The one interface between the forward pass and a KV-cache policy, in host or device memory.
//
// Once per batch the forward pass lets the cache prepare for the batch's rows; then per layer it
// asks for two things and nothing else: store this batch's K and V rows, and attend each query row
// over its own sequence's positions 0..pos. Every chapter swaps the policy behind these calls; the
// model code never changes. The tensors are in the memory of the forward pass that calls: host
// arrays from the CPU backend, device arrays from the CUDA one (common/forward/backend.hpp), and a
// cache keeps its K and V in the same memory (common/cache/kv_storage.hpp).
#pragma once

#include <cstddef>
#include <vector>

#include "common/cache/batch.hpp"

namespace kvheap {

/// \brief A KV-cache policy: where each sequence's positions live, and the attention over them.
class KVCache {
 public:
  virtual ~KVCache() = default;

  /// \brief Called once before the layers of a forward pass over `batch`: checks its rows against
  /// the sequences held and grows them to the positions the rows write (a reservation's length, a
  /// page table), so every layer's write() and attend() find them in place; a cache in device
  /// memory uploads what its kernels need here, once per batch. Throws, changing nothing, when a
  /// row does not continue its sequence or the memory is exhausted.
  virtual void prepare(const Batch& batch) = 0;

  /// \brief Stores K and V of every batch row at (row.seq, row.pos) of `layer` (after prepare()).
  /// \param layer which transformer block, 0-based
  /// \param batch the rows being run; row i's K and V are row i of `k` and `v`
  /// \param k [batch.size(), n_kv_heads * head_dim] fp32, RoPE already applied
  /// \param v [batch.size(), n_kv_heads * head_dim] fp32
  virtual void write(int layer, const Batch& batch, const float* k, const float* v) = 0;

  /// \brief Causal attention of each row over its sequence's cached positions 0..row.pos.
  /// \param layer which transformer block, 0-based
  /// \param batch the rows being run, as passed to write()
  /// \param q   [batch.size(), n_heads * head_dim] fp32, RoPE already applied
  /// \param out [batch.size(), n_heads * head_dim] fp32, written
  ///
  /// Called after write() for the same layer and batch, so rows of one prompt see each other.
  virtual void attend(int layer, const Batch& batch, const float* q, float* out) = 0;

  /// \brief Bytes of memory the policy holds for K and V right now.
  [[nodiscard]] virtual std::size_t bytes_reserved() const = 0;
  /// \brief Bytes that hold a token's K or V (the rest is waste).
  [[nodiscard]] virtual std::size_t bytes_used() const = 0;
  /// \brief Positions the last prepared batch's attention reads in each layer: every row's
  /// context, less what a policy that reads shared prefixes once saves.
  [[nodiscard]] virtual long positions_read() const = 0;
  /// \brief The part of positions_read() that shared levels read once, by level (top first):
  /// a system prompt, then the documents after it, and so on; empty for a policy that reads
  /// nothing once.
  [[nodiscard]] virtual std::vector<long> shared_positions_read() const { return {}; }
};

}  // namespace kvheap
