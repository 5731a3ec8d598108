// The block pool: fixed-size blocks of KV storage handed out from a free list.
//
// This is the heart of paging. Memory is cut into num_blocks blocks of block_size token slots;
// a sequence owns whichever blocks it was given, in any order, and its page table says which.
// Allocation and free are O(1) stack operations. Every block carries a reference count (1 =
// owned by one page-table entry) so that chapter 4 can share blocks between sequences.
#pragma once

#include <cstdint>
#include <vector>

namespace kvheap::ch03 {

/// \brief A free list of block ids with a reference count per block.
class BlockPool {
 public:
  /// \brief `num_blocks` blocks of `block_size` slots. With a non-zero `shuffle_seed` the free
  /// list hands blocks out in a random order, so nothing can rely on contiguity.
  BlockPool(int num_blocks, int block_size, std::uint64_t shuffle_seed = 0);

  /// \brief Blocks in the pool.
  [[nodiscard]] int num_blocks() const { return static_cast<int>(ref_count_.size()); }
  /// \brief Token slots per block.
  [[nodiscard]] int block_size() const { return block_size_; }
  /// \brief Blocks on the free list.
  [[nodiscard]] int num_free() const { return static_cast<int>(free_.size()); }
  /// \brief Blocks with a reference count above zero.
  [[nodiscard]] int num_used() const { return num_blocks() - num_free(); }
  /// \brief Blocks that `num_tokens` positions occupy: ceil(num_tokens / block_size). Throws
  /// InputError for a negative count.
  [[nodiscard]] long blocks_for(long num_tokens) const;
  /// \brief True when `n` blocks can be allocated now.
  [[nodiscard]] bool can_allocate(long n = 1) const { return n <= num_free(); }

  /// \brief Pops a free block and sets its reference count to 1; throws ResourceError when the
  /// pool is exhausted (the pool is unchanged then).
  int allocate();
  /// \brief Adds a reference to a used block (chapter 4 shares blocks this way).
  void retain(int block);
  /// \brief Drops a reference; the block returns to the free list when none are left.
  void release(int block);
  /// \brief References held on `block` (0 = free).
  [[nodiscard]] int ref_count(int block) const;

  /// \brief Throws std::logic_error unless the free list holds exactly the blocks whose reference
  /// count is 0, each once: a block listed twice would be handed out twice, and one missing
  /// would never be handed out again.
  void check_invariants() const;

 private:
  void check_id(int block, const char* what) const;

  int block_size_;
  std::vector<int> free_;       // stack of free block ids; back() is handed out next
  std::vector<int> ref_count_;  // [num_blocks]
};

}  // namespace kvheap::ch03
