// Chapter 4's policy on either backend: a sharing cache and a forward pass over it, in host memory
// (Eigen and the CPU twins) or in device memory (cuBLAS and the CUDA kernels, or the simulator).
// Chapter 4's program and chapter 5's scheduler drive it the same way whichever it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "chapters/04_cow_prefix_sharing/shared_block_manager.hpp"
#include "common/bandwidth.hpp"
#include "common/batch.hpp"
#include "common/model_config.hpp"
#include "common/weights.hpp"

namespace kvheap::ch04 {

/// \brief What to build a SharedBackend with.
struct SharedBackendConfig {
  std::string device = "cpu";      ///< cpu or cuda (the simulator in a sim build)
  DType kv = DType::F32;           ///< K and V storage
  DType weights = DType::F32;      ///< weight matrices on the device (cpu: fp32 only)
  int num_blocks = 0;              ///< blocks in the pool
  int block_size = 16;             ///< token slots per block
  std::uint64_t shuffle_seed = 1;  ///< order of the free list; 0 hands out blocks in order
  bool read_once = true;           ///< shared prefixes read once per step for all their rows
  bool measure_peak = true;        ///< measure the bandwidth peak the report compares against
  int threads = 1;                 ///< CPU threads, for the device description
};

/// \brief A sharing cache and the forward pass over it, on the CPU or a CUDA device.
class SharedBackend {
 public:
  /// \brief Builds the cache and uploads `weights` (which must outlive this object on the CPU).
  /// Throws UsageError for a configuration the backend cannot run (fp16 weights on the CPU) and
  /// ResourceError for `cuda` in a build without CUDA code or without a device.
  SharedBackend(const ModelWeights& weights, const SharedBackendConfig& config);
  ~SharedBackend();
  SharedBackend(const SharedBackend&) = delete;
  SharedBackend& operator=(const SharedBackend&) = delete;

  /// \brief One forward pass; the wanted rows' logits, [num_logit_rows, vocab_size].
  std::span<const float> forward(const Batch& batch);
  /// \brief The allocator behind the cache.
  SharedBlockManager& blocks();
  /// \brief Positions the last batch's attention read per layer.
  [[nodiscard]] long positions_read() const;
  /// \brief Bytes of every block in use (held or cached).
  [[nodiscard]] std::size_t bytes_reserved() const;
  /// \brief Bytes of the slots that hold a position, each shared slot once.
  [[nodiscard]] std::size_t bytes_used() const;
  /// \brief "cpu (2 threads)", or the device's name (the simulator says it is not a GPU).
  [[nodiscard]] const std::string& device_name() const { return device_name_; }
  /// \brief Bandwidth peak measured at start (gbps 0 when not measured) and what it measured.
  [[nodiscard]] const MeasuredPeak& peak() const { return peak_; }

 private:
  struct Impl;  // the host or the device pair; keeps CUDA headers out of this one
  std::unique_ptr<Impl> impl_;
  std::string device_name_;
  MeasuredPeak peak_;
};

}  // namespace kvheap::ch04
