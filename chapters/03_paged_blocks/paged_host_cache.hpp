// Chapter 3's policy in host memory: a block pool, page tables, and the CPU attention twin reading
// through them. Used by --device cpu and as the reference for the GPU version.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chapters/03_paged_blocks/block_manager.hpp"
#include "chapters/03_paged_blocks/paged_batch.hpp"
#include "chapters/03_paged_blocks/paged_host_storage.hpp"
#include "common/kv_cache.hpp"
#include "common/model_config.hpp"

namespace kvheap::ch03 {

/// \brief Per layer, K and V live in [num_blocks, block_size, n_kv_heads, head_dim] host arrays
/// (PagedHostStorage); sequences are BlockManager ids (the batch's `slot` field).
class PagedHostCache final : public KVCache {
 public:
  /// \brief A pool of `num_blocks` blocks of `block_size` slots, handed out in a shuffled order
  /// when `shuffle_seed` is non-zero.
  PagedHostCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
                 std::uint64_t shuffle_seed);

  /// \brief The allocator: admit, grow and free sequences through it.
  BlockManager& blocks() { return blocks_; }
  /// \copydoc blocks()
  [[nodiscard]] const BlockManager& blocks() const { return blocks_; }

  void prepare(const Batch& batch) override;
  void write(int layer, const Batch& batch, const float* k, const float* v) override;
  void attend(int layer, const Batch& batch, const float* q, float* out) override;
  [[nodiscard]] std::size_t bytes_reserved() const override;
  [[nodiscard]] std::size_t bytes_used() const override;

 private:
  std::size_t bytes_per_token_;
  BlockManager blocks_;
  PagedHostStorage storage_;
  PagedBatch current_;  // built by prepare(), used by every layer of the batch
};

}  // namespace kvheap::ch03
