// Chapter 4's policy on the GPU: the sharing block manager of SharedHostCache over chapter 3's
// device pool, with copy-on-write as device-to-device copies and shared prefixes read once by
// cuda::shared_prefix_attention.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "chapters/03_paged_blocks/paged_gpu_storage.hpp"
#include "chapters/04_cow_prefix_sharing/shared_batch.hpp"
#include "chapters/04_cow_prefix_sharing/shared_block_manager.hpp"
#include "common/device_kv_cache.hpp"
#include "common/model_config.hpp"

namespace kvheap::ch04 {

/// \brief Reference-counted blocks with fork, copy-on-write and a prefix index; K and V in device
/// arrays [num_blocks, block_size, n_kv_heads, head_dim] per layer (ch03::PagedGpuStorage).
class SharedGpuCache final : public DeviceKVCache {
 public:
  /// \brief See SharedHostCache; throws ResourceError when the pool does not fit the device.
  SharedGpuCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
                 std::uint64_t shuffle_seed, bool read_once = true);
  ~SharedGpuCache() override;

  /// \brief The allocator: admit, fork, grow and free sequences through it.
  SharedBlockManager& blocks() { return blocks_; }
  /// \copydoc blocks()
  [[nodiscard]] const SharedBlockManager& blocks() const { return blocks_; }

  /// \brief Appends the batch's rows, queues the copies-on-write on the device, and uploads the
  /// page tables and the shared-prefix plan in one copy.
  void prepare(const Batch& batch) override;
  void write(int layer, const float* k, const float* v) override;
  void attend(int layer, const float* q, float* out) override;
  /// \brief Every block in use, held by a sequence or only cached by the prefix index.
  [[nodiscard]] std::size_t bytes_reserved() const override;
  /// \brief Slots that hold a position, each shared slot once.
  [[nodiscard]] std::size_t bytes_used() const override;
  /// \brief Positions the last batch's attention read per layer: as SharedHostCache counts them,
  /// except that a group of more than 16 query heads per KV head reads its prefix once per
  /// 16-head slice (kGpuHeadsPerBlock).
  [[nodiscard]] long positions_read() const;

 private:
  struct Device;  // the plan's device view, the wide queries and the workspaces
  ModelConfig config_;
  DType kv_;
  std::size_t bytes_per_token_;
  bool read_once_;
  SharedBlockManager blocks_;
  ch03::PagedGpuStorage storage_;
  SharedBatch current_;  // host copy of the prepared batch
  std::unique_ptr<Device> dev_;
};

}  // namespace kvheap::ch04
