// Chapter 3's policy: a block pool and page tables, written once for host and device memory.
//
// The allocator (BlockManager) is host code. Once per batch, prepare() appends each row's
// position to its sequence, allocating a block when the last one is full, and hands the storage
// the batch's page tables in CSR form; the storage reads K and V through them (the CPU twin's
// PagedRows, or cuda::paged_attention). Only the address of a position differs from chapter 2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "chapters/03_paged_blocks/block_manager.hpp"
#include "common/cache/storage_cache.hpp"
#include "common/cache/kv_storage.hpp"
#include "common/model/model_config.hpp"

namespace kvheap::ch03 {

/// \brief Grows each row's sequence to cover its position (append_slot for a new position,
/// slot_of for one already written) and returns the batch's view: the slot each row writes and
/// the page tables of every sequence in the batch.
///
/// Rows of one sequence must come in increasing position order, each position once, and a new
/// position must be the sequence's next one; else InputError. When the pool cannot hold the
/// batch's new positions it throws ResourceError before growing any sequence, so a failed batch
/// changes nothing.
KVView paged_view(BlockManager& blocks, const Batch& batch);

/// \brief Per layer, K and V are [num_blocks, block_size, n_kv_heads, head_dim] arrays in host
/// or device memory; sequences are BlockManager ids (the batch's `slot` field), admitted through
/// blocks(). The pool is allocated (and zeroed) up front, as a server does with its KV budget;
/// what paging changes is that a sequence holds only the blocks its tokens fill, in any order.
class PagedCache final : public StorageCache {
 public:
  /// \brief A pool of `num_blocks` blocks of `block_size` slots in dtype `kv`, in `memory`,
  /// handed out in a shuffled order when `shuffle_seed` is non-zero. Throws ResourceError when
  /// the memory cannot hold the pool.
  PagedCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
             std::uint64_t shuffle_seed, Memory memory);

  /// \brief The allocator: admit, grow and free sequences through it.
  BlockManager& blocks() { return blocks_; }
  /// \copydoc blocks()
  [[nodiscard]] const BlockManager& blocks() const { return blocks_; }

  /// \brief Bytes of the blocks sequences hold (block_size x kv_bytes_per_token each).
  [[nodiscard]] std::size_t bytes_reserved() const override;
  [[nodiscard]] std::size_t bytes_used() const override;

 private:
  /// \brief paged_view() of the batch.
  KVView view_for(const Batch& batch) override { return paged_view(blocks_, batch); }

  std::size_t bytes_per_token_;
  BlockManager blocks_;
};

}  // namespace kvheap::ch03
