// The CPU forward pass: a Llama-family decoder over a flattened batch, behind the KVCache
// interface.
#pragma once

#include <span>
#include <vector>

#include "common/cache/batch.hpp"
#include "common/cache/kv_cache.hpp"
#include "common/forward/activations.hpp"
#include "common/model/weights.hpp"
#include "kernels/matmul.hpp"

namespace kvheap {

/// \brief Runs batches through the model on the CPU (OpenMP), reading and extending a KVCache.
/// Holds its own copy of the weight matrices, packed for cpu::matmul, and scratch activations;
/// the rest of the model state lives in the weights and the cache.
class CpuForward {
 public:
  /// \brief Keeps a reference to `weights`, which must outlive this object (the embedding table
  /// and the norms are read from it), and packs its matrices as `weight_dtype` (fp32, bf16 or
  /// fp16; the narrow ones rounded to nearest even), bf16 ones multiplied as `bf16` says. Throws
  /// InputError as check_qk_norm_gains and cpu::PackedMatrix do, ResourceError when the packed
  /// copy does not fit in memory.
  explicit CpuForward(const ModelWeights& weights, DType weight_dtype = DType::F32,
                      cpu::Bf16Products bf16 = cpu::Bf16Products::kWiden);

  /// \brief Checks `batch` and lays out `cache` for it (its prepare()); the next forward() runs
  /// this batch over it. Throws InputError as forward() does.
  void prepare(const Batch& batch, KVCache& cache);
  /// \brief One forward pass; returns logits [batch.num_logit_rows(), vocab_size] in row order.
  /// Prepares the cache itself unless prepare() came just before.
  ///
  /// Throws InputError for a token id outside the vocabulary or a position past max_seq_len.
  std::span<const float> forward(const Batch& batch, KVCache& cache);

  /// \brief The model this pass runs.
  [[nodiscard]] const ModelWeights& weights() const { return w_; }
  /// \brief Seconds the last prepare() spent in the cache's prepare().
  [[nodiscard]] double prepare_seconds() const { return prepare_seconds_; }
  /// \brief Element type of the packed weight matrices.
  [[nodiscard]] DType weight_dtype() const { return weight_dtype_; }
  /// \brief How the packed matrices multiply bf16 weights (kernels/matmul.hpp).
  [[nodiscard]] cpu::Bf16Products bf16_products() const { return classifier_.bf16_products(); }
  /// \brief Bytes of the packed weight matrices (what the passes read of the weights).
  [[nodiscard]] std::size_t packed_bytes() const { return packed_bytes_; }
  /// \brief Seconds the constructor spent packing the weights (for a memory-mapped file, this
  /// includes faulting its pages in).
  [[nodiscard]] double pack_seconds() const { return pack_seconds_; }

 private:
  void resize(int n);

  /// One layer's matrices, packed.
  struct PackedLayer {
    cpu::PackedMatrix wq, wk, wv, wo, w1, w2, w3;
  };

  const ModelWeights& w_;
  DType weight_dtype_;
  std::vector<PackedLayer> layers_;
  cpu::PackedMatrix classifier_;
  std::size_t packed_bytes_ = 0;
  double pack_seconds_ = 0;
  std::vector<float> inv_freq_;        // [head_dim/2]
  Activations<std::vector<float>> a_;  // of the current batch (n rows)
  std::vector<float> last_;            // [n_logit_rows, dim]
  std::vector<float> logits_;          // [n_logit_rows, vocab_size]
  std::vector<int> pos_;               // [n]
  double prepare_seconds_ = 0;
  bool prepared_ = false;  // prepare() ran for the next forward()
};

/// \brief Throws InputError when the config asks for Qwen3's q/k norms and a layer of `w` lacks
/// their gains: running without them would be a silent wrong answer.
void check_qk_norm_gains(const ModelWeights& w);

/// \brief Checks every row of `batch` against the model: token in the vocabulary, position
/// inside the context. Throws InputError naming the row.
void validate_batch(const Batch& batch, const ModelConfig& c);

}  // namespace kvheap
