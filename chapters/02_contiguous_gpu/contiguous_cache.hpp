// Chapter 2's policy on the GPU: the same max_seq_len reservation as chapter 1, as one
// contiguous array in device memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/device_kv_cache.hpp"
#include "common/model_config.hpp"

namespace kvheap::ch02 {

/// \brief Per layer, K and V are device arrays [max_slots, max_seq_len, n_kv_heads, head_dim];
/// a slot is a sequence's reservation. The whole array is allocated up front, as a GPU server
/// does, so the waste is decided the moment the server starts.
class ContiguousGpuCache final : public DeviceKVCache {
 public:
  /// \brief Reserves `max_slots` sequences of max_seq_len tokens in dtype `kv`; throws
  /// ResourceError when that does not fit the device's free memory.
  ContiguousGpuCache(const ModelConfig& config, DType kv, int max_slots);
  ~ContiguousGpuCache() override;

  /// \brief Slots (sequences) that fit `budget_bytes` under max_seq_len reservation; throws
  /// ResourceError naming both sizes when not even one does.
  static int slots_for_budget(const ModelConfig& config, DType kv, std::size_t budget_bytes);

  /// \brief True when a slot is free.
  [[nodiscard]] bool can_admit() const;
  /// \brief Takes a free slot; throws ResourceError when all are taken.
  int admit();
  /// \brief Frees `slot` (its bytes stay reserved: that is the policy).
  void release(int slot);
  /// \brief Tokens cached for `slot`.
  [[nodiscard]] int length(int slot) const;

  void prepare(const Batch& batch) override;
  void write(int layer, const float* k, const float* v) override;
  void attend(int layer, const float* q, float* out) override;
  [[nodiscard]] std::size_t bytes_reserved() const override;
  [[nodiscard]] std::size_t bytes_used() const override;

 private:
  struct Device;  // device buffers and the attention workspace, kept out of this header

  ModelConfig config_;
  DType kv_;
  int max_slots_;
  std::vector<int> length_;  // [max_slots]; -1 = free slot
  int rows_ = 0;             // rows of the prepared batch
  int max_ctx_ = 0;          // longest context in the prepared batch
  std::unique_ptr<Device> dev_;
};

}  // namespace kvheap::ch02
