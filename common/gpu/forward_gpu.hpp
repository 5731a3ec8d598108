// The GPU forward pass: CpuForward's steps, one for one, on device memory behind a KVCache whose
// storage is in device memory.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/batch.hpp"
#include "common/kv_cache.hpp"
#include "common/gpu/device_weights.hpp"
#include "common/weights.hpp"
#include "device/buffers.hpp"
#include "device/gemm.hpp"

namespace kvheap {

/// \brief Runs batches through the model on a GPU (or the CPU simulator of one), reading and
/// extending a KVCache that keeps its K and V in device memory.
///
/// Owns the weights in device memory, one BLAS handle, and scratch activations that grow to the
/// largest batch seen and are reused after that. Everything runs on the default stream: the
/// cache interface has no stream parameter, and the default stream orders the cache's kernels
/// after ours without any extra synchronisation. Not thread-safe; one per thread.
class GpuForward {
 public:
  /// \brief Uploads `weights` with matrices in `weight_dtype` (fp32, fp16 or bf16); `weights` is
  /// not referenced afterwards.
  GpuForward(const ModelWeights& weights, DType weight_dtype);

  /// \brief One forward pass; returns logits [batch.num_logit_rows(), vocab_size] in row order,
  /// downloaded into host memory owned by this object (valid until the next call).
  ///
  /// Throws InputError for a token id outside the vocabulary or a position past max_seq_len.
  std::span<const float> forward(const Batch& batch, KVCache& cache);

  /// \brief One forward pass with greedy sampling on the device: the argmax token id of each
  /// logit row ([batch.num_logit_rows()]); only the ids cross to the host.
  ///
  /// Ties go to the lowest id, as kvheap::argmax. Throws InputError as forward() does, and when a
  /// row of logits holds a NaN.
  std::vector<int> forward_greedy(const Batch& batch, KVCache& cache);

  /// \brief The model this pass runs.
  [[nodiscard]] const ModelConfig& config() const noexcept { return w_.config(); }
  /// \brief The weights in device memory.
  [[nodiscard]] const DeviceWeights& weights() const noexcept { return w_; }
  /// \brief Bytes of device memory held for activations (grows with the largest batch).
  [[nodiscard]] std::size_t scratch_bytes() const noexcept;

 private:
  int run(const Batch& batch, KVCache& cache);
  void reserve(int n, int m);
  const void* gemm_input(const float* x, long count);
  void project(const void* a, const DeviceMatrix& w, float* y, int rows);

  DeviceWeights w_;
  BlasHandle blas_;
  DeviceBuffer<float> inv_freq_;  // [head_dim / 2] RoPE inverse frequencies
  // Batch description (n rows, m of them want logits).
  DeviceBuffer<int> tokens_;      // [n] token id of each row
  DeviceBuffer<int> pos_;         // [n] position of each row
  DeviceBuffer<int> logit_rows_;  // [m] batch rows that want logits
  DeviceBuffer<int> ids_;         // [m] greedy token ids
  // Activations of the current batch.
  DeviceBuffer<float> x_;           // [n, dim] residual stream
  DeviceBuffer<float> xn_;          // [n, dim] normalised input of a sub-block
  DeviceBuffer<float> q_;           // [n, q_dim]
  DeviceBuffer<float> k_;           // [n, kv_dim]
  DeviceBuffer<float> v_;           // [n, kv_dim]
  DeviceBuffer<float> att_;         // [n, q_dim]
  DeviceBuffer<float> proj_;        // [n, dim]
  DeviceBuffer<float> gate_;        // [n, hidden_dim]
  DeviceBuffer<float> up_;          // [n, hidden_dim]
  DeviceBuffer<float> last_;        // [m, dim]
  DeviceBuffer<float> logits_;      // [m, vocab_size]
  DeviceBuffer<std::byte> narrow_;  // [n, max(dim, q_dim, hidden_dim)] GEMM input in weight dtype
  // Host side.
  std::vector<int> host_ints_;      // [n] staging for the batch description
  std::vector<float> host_logits_;  // [m, vocab_size] what forward() returns
};

}  // namespace kvheap
