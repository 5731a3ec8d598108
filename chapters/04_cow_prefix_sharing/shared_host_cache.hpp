// Chapter 4's policy in host memory: chapter 3's paged storage behind a sharing block manager.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chapters/03_paged_blocks/paged_host_storage.hpp"
#include "chapters/04_cow_prefix_sharing/shared_batch.hpp"
#include "chapters/04_cow_prefix_sharing/shared_block_manager.hpp"
#include "common/kv_cache.hpp"
#include "common/model_config.hpp"

namespace kvheap::ch04 {

/// \brief Reference-counted blocks with fork, copy-on-write and a prefix index; K and V in
/// [num_blocks, block_size, n_kv_heads, head_dim] host arrays per layer. Sequences are
/// SharedBlockManager ids (the batch's `slot` field).
class SharedHostCache final : public KVCache {
 public:
  /// \brief A pool of `num_blocks` blocks of `block_size` slots (shuffled when `shuffle_seed` is
  /// non-zero). With `read_once`, rows that share a prefix read it once per step for all of them
  /// (cpu::attend_batch_shared_prefix); without, every row reads its whole context, as in
  /// chapter 3.
  SharedHostCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
                  std::uint64_t shuffle_seed, bool read_once = true);

  /// \brief The allocator: admit, fork, grow and free sequences through it.
  SharedBlockManager& blocks() { return blocks_; }
  /// \copydoc blocks()
  [[nodiscard]] const SharedBlockManager& blocks() const { return blocks_; }

  /// \brief Appends the batch's rows (build_shared_batch), then makes the copies-on-write it
  /// asked for, before any layer writes.
  void prepare(const Batch& batch) override;
  void write(int layer, const Batch& batch, const float* k, const float* v) override;
  void attend(int layer, const Batch& batch, const float* q, float* out) override;
  /// \brief Every block in use, held by a sequence or only cached by the prefix index.
  [[nodiscard]] std::size_t bytes_reserved() const override;
  /// \brief Slots that hold a position, each shared slot once.
  [[nodiscard]] std::size_t bytes_used() const override;
  /// \brief Positions the last batch's attention read per layer: shared prefixes once when
  /// reading once, else every row's whole context.
  [[nodiscard]] long positions_read() const;

 private:
  std::size_t bytes_per_token_;
  SharedBlockManager blocks_;
  ch03::PagedHostStorage storage_;
  bool read_once_;
  SharedBatch current_;  // built by prepare(), used by every layer of the batch
};

}  // namespace kvheap::ch04
