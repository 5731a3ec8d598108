// The GPU forward pass: CpuForward's steps, one for one, on device memory behind a KVCache whose
// storage is in device memory.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/cache/batch.hpp"
#include "common/cache/kv_cache.hpp"
#include "common/forward/activations.hpp"
#include "common/model/cuda/device_weights.hpp"
#include "common/model/weights.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#include "device/gemm.hpp"
#include "device/staged_upload.hpp"
#include "kernels/sample.hpp"

namespace kvheap {

/// \brief Runs batches through the model on a GPU (or the CPU simulator of one), reading and
/// extending a KVCache that keeps its K and V in device memory.
///
/// Owns the weights in device memory, one BLAS handle, and scratch activations that grow to the
/// largest batch seen (in powers of two) and are kept. A pass costs the host one upload (the
/// batch, the sampling jobs and the cache's view together, from pinned memory), the launches, and
/// one wait on an event for the chosen tokens: 16 bytes a job. The logits stay on the device
/// unless logits() asks for them. Everything runs on the default stream: the cache interface has
/// no stream parameter, and the default stream orders the cache's kernels after ours without any
/// extra synchronisation. Not thread-safe; one per thread.
class GpuForward {
 public:
  /// \brief Uploads `weights` with matrices in `weight_dtype` (fp32, fp16 or bf16); `weights` is
  /// not referenced afterwards.
  GpuForward(const ModelWeights& weights, DType weight_dtype);

  /// \brief Checks `batch` and lays out `cache` for it (its prepare()), staging the cache's view
  /// as the first part of the pass's one upload; the next forward() runs this batch over it.
  /// Throws InputError as forward() does for a bad row.
  void prepare(const Batch& batch, KVCache& cache);

  /// \brief One forward pass, and one token chosen on the device per job (kernels/sample.hpp):
  /// [jobs.size()], valid until the next pass. Only those 16 bytes a job cross to the host.
  /// Prepares the cache itself unless prepare() came just before.
  ///
  /// Throws InputError for a token id outside the vocabulary, a position past max_seq_len or a
  /// job whose row is not one of the batch's logit rows. A job's negative token code (a NaN
  /// logit) is the caller's to report.
  std::span<const SampledToken> forward(const Batch& batch, KVCache& cache,
                                        std::span<const SamplingJob> jobs);

  /// \brief One forward pass; returns its logits [batch.num_logit_rows(), vocab_size] in row
  /// order, downloaded into host memory owned by this object (valid until the next call).
  std::span<const float> forward(const Batch& batch, KVCache& cache);

  /// \brief The last pass's logits [num_logit_rows, vocab_size], downloaded on the first call
  /// after the pass: the one full-logits download, made only for a caller that asks.
  std::span<const float> logits();

  /// \brief Where the last pass's time went (device times from events).
  [[nodiscard]] const PassTimes& last_times() const noexcept { return times_; }
  /// \brief The model this pass runs.
  [[nodiscard]] const ModelConfig& config() const noexcept { return w_.config(); }
  /// \brief The weights in device memory.
  [[nodiscard]] const DeviceWeights& weights() const noexcept { return w_; }
  /// \brief Bytes of device memory held for activations (grows with the largest batch).
  [[nodiscard]] std::size_t scratch_bytes() const noexcept;

 private:
  void run(const Batch& batch, KVCache& cache, std::span<const SamplingJob> jobs);
  void stage_view(const Batch& batch, KVCache& cache);  // the cache's prepare(), into staged_
  void reserve(int n, int m, int jobs, int draws);
  const void* gemm_input(const float* x, long count);
  void project(const void* a, const DeviceMatrix& w, float* y, int rows);

  DeviceWeights w_;
  BlasHandle blas_;
  DeviceBuffer<float> inv_freq_;  // [head_dim / 2] RoPE inverse frequencies
  // The pass's one upload: the batch description and the jobs below, and the cache's view.
  StagedUpload staged_;
  const int* tokens_ = nullptr;         // [n] token id of each row
  const int* pos_ = nullptr;            // [n] position of each row
  const int* logit_rows_ = nullptr;     // [m] batch rows that want logits
  const SamplingJob* jobs_ = nullptr;   // [jobs]
  const int* draws_ = nullptr;          // [draws] the jobs that draw
  Activations<DeviceBuffer<float>> a_;  // of the current batch (n rows)
  DeviceBuffer<float> last_;            // [m, dim]
  DeviceBuffer<float> logits_;          // [m, vocab_size]
  DeviceBuffer<std::byte> narrow_;    // [n, max(dim, q_dim, hidden_dim)] GEMM input in weight dtype
  DeviceBuffer<float> probs_;         // [draws, vocab_size] each draw's p (kernels/sample.hpp)
  DeviceBuffer<SampledToken> picks_;  // [jobs] what the jobs chose
  // Host side.
  PinnedBuffer<SampledToken> host_picks_;  // [jobs] their download
  Event started_, forwarded_, done_;       // the pass's device time: forward, then sampling
  std::vector<int> host_ints_;             // [n] staging for the batch description
  std::vector<int> host_draws_;            // [draws] the jobs that draw
  std::vector<float> host_logits_;         // [m, vocab_size] what logits() returns
  int logit_rows_count_ = 0;               // m of the last pass
  bool logits_fresh_ = false;              // host_logits_ holds the last pass's logits
  PassTimes times_;
  double prepare_seconds_ = 0;  // the last prepare()'s host time
  bool prepared_ = false;       // prepare() ran for the next pass
};

}  // namespace kvheap
