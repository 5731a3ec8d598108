// Page tables over a block pool: which physical blocks hold each sequence's positions.
//
//   sequence 0: page table [ 7, 2, 9 ]     positions 0..15 -> block 7, 16..31 -> block 2, ...
//   sequence 1: page table [ 4 ]
//   physical slot of (seq, pos) = table[pos / block_size] * block_size + pos % block_size
//
// The operations are named in the allocator vocabulary: can_allocate / allocate admit a sequence,
// can_append / append_slot grow it one token at a time, free returns every block it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chapters/03_paged_blocks/block_pool.hpp"
#include "chapters/03_paged_blocks/sequence_table.hpp"

namespace kvheap::ch03 {

/// \brief A block pool plus one page table per live sequence.
class BlockManager {
 public:
  /// \brief See BlockPool for the arguments.
  BlockManager(int num_blocks, int block_size, std::uint64_t shuffle_seed = 0);

  /// \brief Blocks a sequence of `num_tokens` positions occupies: ceil(num_tokens / block_size).
  /// Throws InputError for a negative count.
  [[nodiscard]] long blocks_for(long num_tokens) const;
  /// \brief True when a new sequence with `num_tokens` positions fits in the free blocks now.
  [[nodiscard]] bool can_allocate(long num_tokens) const;
  /// \brief Admits a sequence and reserves blocks for its first `num_tokens` positions (its
  /// length stays 0 until append_slot fills them). Returns its id, the lowest free one; throws
  /// ResourceError naming the shortfall when the pool cannot hold it, leaving every other
  /// sequence untouched.
  int allocate(long num_tokens = 0);
  /// \brief True when one more token fits: the last block has room, or a block is free.
  [[nodiscard]] bool can_append(int seq) const;
  /// \brief Takes the next position of `seq` and returns its physical slot, allocating a block
  /// when the last one is full. Throws ResourceError (state unchanged) when the pool is empty.
  std::int64_t append_slot(int seq);
  /// \brief Physical slot of an existing position.
  [[nodiscard]] std::int64_t slot_of(int seq, int pos) const;
  /// \brief Releases every block of `seq`; its id may be reused.
  void free(int seq);

  /// \brief True when `seq` is a live sequence.
  [[nodiscard]] bool is_live(int seq) const;
  /// \brief Positions filled in `seq`.
  [[nodiscard]] int length(int seq) const;
  /// \brief Physical block ids of `seq`, in logical order.
  [[nodiscard]] const std::vector<int>& page_table(int seq) const;
  /// \brief Ids of the live sequences, ascending.
  [[nodiscard]] std::vector<int> live_sequences() const;
  /// \brief The pool underneath.
  [[nodiscard]] const BlockPool& pool() const { return pool_; }
  /// \brief Token slots of all used blocks (what paging holds).
  [[nodiscard]] std::size_t slots_held() const;
  /// \brief Positions filled over all sequences (what is actually needed).
  [[nodiscard]] std::size_t tokens_held() const;

  /// \brief Throws std::logic_error unless the pool's free list is sound
  /// (BlockPool::check_invariants), every block is either free or owned by exactly one page-table
  /// entry, used + free = total, every sequence's table covers its length, and no free id lies
  /// below the point where allocate starts its search.
  void check_invariants() const;

 private:
  struct Sequence {
    bool live = false;
    int length = 0;
    std::vector<int> blocks;  // page table: logical block i -> physical block id
  };

  BlockPool pool_;
  SequenceTable<Sequence> seqs_;
};

}  // namespace kvheap::ch03
