// Page tables whose blocks may be shared: fork, copy-on-write and a prefix index over chapter 3's
// reference-counted block pool.
//
//   fork:           seq 0: [ 7, 2, 9 ]   seq 1 = fork(0): [ 7, 2, 9 ]   ref counts 7:2 2:2 9:2
//   copy-on-write:  seq 1 appends into block 9 (shared, not full): block 4 <- copy of 9,
//                   seq 1: [ 7, 2, 4 ]   ref counts 9:1 4:1
//   prefix index:   a new prompt starting with the tokens of blocks 7 and 2 takes them as they are:
//                   seq 2: [ 7, 2 ] + its own blocks; those positions are never computed again
//
// A sequence's blocks are read-only for it while another sequence or the index holds them: full
// blocks are never written again (positions already held cannot be rewritten here), and the one
// block that can still grow, the last, is copied before the first write when it is shared. The
// copy is the storage's job: the manager lists it (take_copies) and the cache makes it before the
// batch writes anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "chapters/03_paged_blocks/block_pool.hpp"
#include "chapters/03_paged_blocks/sequence_table.hpp"
#include "chapters/04_cow_prefix_sharing/prefix_index.hpp"

namespace kvheap::ch04 {

/// \brief A copy the storage must make before the batch writes: the first `slots` token slots of
/// block `src` into block `dst`, in every layer, for K and for V.
struct BlockCopy {
  int src = -1;   ///< shared block being written by a sequence that does not own it alone
  int dst = -1;   ///< the sequence's new private block
  int slots = 0;  ///< positions already written in `src`
};

/// \brief Sharing counters of a run, for the report.
struct SharingCounters {
  long forks = 0;            ///< sequences made by fork()
  long tokens_reused = 0;    ///< prompt positions taken from the prefix index, not computed
  long copies_on_write = 0;  ///< blocks copied because a shared last block was written
  long evictions = 0;        ///< cached blocks given back to the pool to make room
};

/// \brief A block pool, a prefix index and one page table per live sequence, with sharing.
class SharedBlockManager {
 public:
  /// \brief `num_blocks` blocks of `block_size` slots; see ch03::BlockPool for `shuffle_seed`.
  SharedBlockManager(int num_blocks, int block_size, std::uint64_t shuffle_seed = 0);

  /// \brief ceil(num_tokens / block_size); InputError for a negative count.
  [[nodiscard]] long blocks_for(long num_tokens) const;
  /// \brief Blocks that can be handed out now: the free ones plus the cached ones nothing but the
  /// index holds (evicted on demand).
  [[nodiscard]] long num_available() const;
  /// \brief Full blocks at the start of `prompt` that the index holds, at most
  /// (prompt.size() - 1) / block_size of them: the last prompt token is always computed, because
  /// its logits are what the next token is sampled from.
  [[nodiscard]] long cached_blocks(std::span<const int> prompt) const;
  /// \brief How many of the cached_blocks(prompt) only the index holds: allocate(prompt) takes
  /// them off the evictable list, so num_available() drops by this many.
  [[nodiscard]] long cached_evictable_blocks(std::span<const int> prompt) const;

  /// \brief Admits a sequence that will hold `prompt`. It takes every block of the longest cached
  /// prefix (cached_blocks) and starts with those positions filled: length() tells where the
  /// positions to compute begin. Needs no free block.
  int allocate(std::span<const int> prompt = {});
  /// \brief A new sequence holding exactly what `parent` holds, every block shared.
  int fork(int parent);
  /// \brief True when `seq` can take one more token: its last block has room and is its alone,
  /// or a block is available.
  [[nodiscard]] bool can_append(int seq) const;
  /// \brief Blocks `seq` takes to grow by `rows` positions: the new blocks past its page table,
  /// plus a private copy of its last block when that block is partly filled and shared. The one
  /// statement of the rule: can_append, the batch check of SharedCache and chapter 5's scheduler
  /// all count with it.
  [[nodiscard]] long blocks_to_grow(int seq, long rows) const;
  /// \brief Appends `token` to `seq` and returns the physical slot of its position. A full last
  /// block gets a new block after it; a shared last block is first replaced by a private copy
  /// (listed for take_copies). A block that this fills is indexed under its prefix. Throws
  /// ResourceError, changing nothing, when no block is available.
  std::int64_t append_slot(int seq, int token);
  /// \brief Physical slot of a position `seq` already holds.
  [[nodiscard]] std::int64_t slot_of(int seq, int pos) const;
  /// \brief The copies append_slot asked for since the last call, in order; the storage must make
  /// them before any of the batch's writes.
  std::vector<BlockCopy> take_copies();
  /// \brief Drops every reference `seq` holds; its indexed blocks stay cached.
  void free(int seq);

  /// \brief True when `seq` is a live sequence.
  [[nodiscard]] bool is_live(int seq) const;
  /// \brief Positions `seq` holds.
  [[nodiscard]] int length(int seq) const;
  /// \brief Tokens at positions 0..length-1 of `seq`.
  [[nodiscard]] const std::vector<int>& tokens(int seq) const;
  /// \brief Physical block ids of `seq`, in logical order.
  [[nodiscard]] const std::vector<int>& page_table(int seq) const;
  /// \brief Ids of the live sequences, ascending.
  [[nodiscard]] std::vector<int> live_sequences() const;
  /// \brief The pool underneath.
  [[nodiscard]] const ch03::BlockPool& pool() const { return pool_; }
  /// \brief The prefix index.
  [[nodiscard]] const PrefixIndex& index() const { return index_; }
  /// \brief What sharing has done so far.
  [[nodiscard]] const SharingCounters& counters() const { return counters_; }

  /// \brief Distinct blocks the live sequences hold (each shared block once).
  [[nodiscard]] long blocks_held() const;
  /// \brief Page-table entries over the live sequences: the blocks they would hold unshared.
  [[nodiscard]] long blocks_referenced() const;
  /// \brief Positions over the live sequences, shared ones counted once per sequence.
  [[nodiscard]] std::size_t tokens_held() const;
  /// \brief Slots of every block in use, held by a sequence or only cached by the index.
  [[nodiscard]] std::size_t slots_in_use() const {
    return static_cast<std::size_t>(pool_.num_used()) * pool_.block_size();
  }
  /// \brief Slots that hold a position, each shared slot once, cached blocks included: what
  /// sharing actually stores.
  [[nodiscard]] std::size_t slots_stored() const;

  /// \brief Throws std::logic_error unless every block's reference count equals its page-table
  /// entries plus one if indexed, the evictable blocks are exactly the indexed ones no sequence
  /// holds, only full blocks are indexed, every copy (a block with content the index holds in
  /// another) is held and unindexed, and every sequence's table covers its length exactly.
  void check_invariants() const;

 private:
  struct Sequence {
    bool live = false;
    std::vector<int> tokens;                   // [length] token at each position
    std::vector<int> blocks;                   // page table: logical block i -> physical block id
    std::uint64_t chain = PrefixIndex::kRoot;  // names the prefix of its full blocks
  };
  int take_block();
  void retain(int block);
  void release(int block);
  void index_full_block(Sequence& s);
  [[nodiscard]] std::vector<int> cached_prefix(std::span<const int> prompt) const;

  ch03::BlockPool pool_;
  PrefixIndex index_;
  ch03::SequenceTable<Sequence> seqs_;
  std::vector<BlockCopy> copies_;
  SharingCounters counters_;
};

}  // namespace kvheap::ch04
