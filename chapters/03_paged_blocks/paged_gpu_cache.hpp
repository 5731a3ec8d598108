// Chapter 3's policy on the GPU: the block pool and page tables of PagedHostCache, with the
// storage in device memory (PagedGpuStorage) and attention done by cuda::paged_attention.
//
// The allocator is the same host code as on the CPU (BlockManager); only the bytes move. Once per
// batch, prepare() grows the page tables on the host and uploads their CSR view; every layer then
// reuses that upload for its KV write and its attention.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chapters/03_paged_blocks/block_manager.hpp"
#include "chapters/03_paged_blocks/paged_gpu_storage.hpp"
#include "common/device_kv_cache.hpp"
#include "common/model_config.hpp"

namespace kvheap::ch03 {

/// \brief Per layer, K and V are device arrays [num_blocks, block_size, n_kv_heads, head_dim];
/// sequences are BlockManager ids (the batch's `slot` field), admitted through blocks().
///
/// The pool is allocated (and zeroed) up front, as a server does with its KV budget; what paging
/// changes is that a sequence holds only the blocks its tokens fill, in any order.
class PagedGpuCache final : public DeviceKVCache {
 public:
  /// \brief A pool of `num_blocks` blocks of `block_size` slots in dtype `kv`, handed out in a
  /// shuffled order when `shuffle_seed` is non-zero. Throws ResourceError when the pool does not
  /// fit the device's free memory.
  PagedGpuCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
                std::uint64_t shuffle_seed);

  /// \brief The allocator: admit, grow and free sequences through it.
  BlockManager& blocks() { return blocks_; }
  /// \copydoc blocks()
  [[nodiscard]] const BlockManager& blocks() const { return blocks_; }

  /// \brief Appends each row's position to its sequence (allocating blocks as they fill) and
  /// uploads the batch's page tables and slot mapping. Throws ResourceError when the pool runs
  /// out and InputError for a non-contiguous position, changing nothing either way.
  void prepare(const Batch& batch) override;
  void write(int layer, const float* k, const float* v) override;
  void attend(int layer, const float* q, float* out) override;
  /// \brief Bytes of the blocks sequences hold (block_size x kv_bytes_per_token each), as
  /// PagedHostCache counts them.
  [[nodiscard]] std::size_t bytes_reserved() const override;
  [[nodiscard]] std::size_t bytes_used() const override;
  /// \brief Bytes of device memory the whole pool occupies, free blocks included.
  [[nodiscard]] std::size_t pool_bytes() const { return storage_.pool_bytes(); }

 private:
  std::size_t bytes_per_token_;
  BlockManager blocks_;
  PagedGpuStorage storage_;
};

}  // namespace kvheap::ch03
