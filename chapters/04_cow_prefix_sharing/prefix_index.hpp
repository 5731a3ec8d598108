// The prefix index: which physical block already holds the K and V of a given run of tokens.
//
// A block's keys and values depend on every token before it, not only on its own, so a block is
// named by its tokens *and* the prefix it continues. Each indexed block gets a chain id that is
// never reused; a block's key is (the chain id of the block before it, its own tokens), with 0 as
// the chain id of the empty prefix:
//
//   "Once upon a time there was" | " a little girl named Lily"
//   key (0, [Once upon a time]) -> block 7, chain 1
//   key (1, [there was a little]) -> block 3, chain 2
//
// Looking a prompt up is a walk from chain 0, one full block at a time. Keys compare the tokens
// themselves, so two different prefixes can never be confused (no hash collisions to reason
// about), and because chain ids are never reused, a key whose parent was evicted can never match
// again.
//
// Only full blocks are indexed: their contents never change again. The index holds one reference
// on each indexed block (the manager retains it), so a block whose sequences have all finished
// stays cached; it is then *evictable*, and evicted least recently used first when the pool has no
// free block left.
//
// A key names a set of blocks. Two sequences can fill a block with the same content on their own
// (the same prompt twice in one batch, or a preempted request computing again what another one
// kept): the first block is the one the index holds and hands out; the others are *copies*, held
// only by their sequences and freed with them. Evicting the indexed block promotes a live copy in
// its place, under the same chain id, so everything indexed after it stays reachable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvheap::ch04 {

/// \brief A block found in the index and the chain id that names the prefix it completes.
struct PrefixHit {
  int block = -1;           ///< physical block id
  std::uint64_t chain = 0;  ///< chain id of the prefix up to and including this block
};

/// \brief Full blocks by content, plus the least-recently-used order of those only it holds.
class PrefixIndex {
 public:
  /// \brief The chain id of the empty prefix: the parent of every sequence's first block.
  static constexpr std::uint64_t kRoot = 0;

  /// \brief The indexed block holding `tokens` right after the prefix `parent` names, if any.
  [[nodiscard]] std::optional<PrefixHit> find(std::uint64_t parent,
                                              std::span<const int> tokens) const;
  /// \brief Indexes `block` as holding `tokens` after `parent` and returns its new chain id.
  /// Throws std::logic_error when the key or the block is indexed already.
  std::uint64_t insert(std::uint64_t parent, std::span<const int> tokens, int block);
  /// \brief Adds `block` to the key of indexed block `indexed` as a copy: it holds the same
  /// content after the same prefix. Throws std::logic_error when `indexed` is not indexed or
  /// `block` is in the index already.
  void add_copy(int indexed, int block);
  /// \brief Evicts indexed `block`: it leaves the index and the evictable list. Returns the copy
  /// that takes its place under the same key (the index then holds a reference on it), or nothing
  /// when the key had no copy and is gone. Throws std::logic_error when `block` is not indexed.
  std::optional<int> evict(int block);
  /// \brief A block that went back to the pool: if it was a copy, it leaves its key.
  void forget(int block);
  /// \brief True when `block` is the indexed block of its key (not a copy).
  [[nodiscard]] bool contains(int block) const {
    const auto it = entry_of_.find(block);
    return it != entry_of_.end() && it->second->second.hit.block == block;
  }
  /// \brief Blocks indexed (one per key; copies not counted).
  [[nodiscard]] std::size_t size() const { return entries_.size(); }
  /// \brief Every copy, with the indexed block of its key: {copy, indexed}.
  [[nodiscard]] std::vector<std::pair<int, int>> copies() const;

  /// \brief Marks an indexed block as held by nothing but the index: the newest evictable one.
  void push_evictable(int block);
  /// \brief A sequence took `block` again: it is no longer evictable.
  void remove_evictable(int block);
  /// \brief True when `block` is on the evictable list.
  [[nodiscard]] bool is_evictable(int block) const { return lru_pos_.count(block) != 0; }
  /// \brief Blocks that could be evicted now.
  [[nodiscard]] std::size_t num_evictable() const { return lru_.size(); }
  /// \brief The least recently used evictable block; throws std::logic_error when there is none.
  [[nodiscard]] int oldest_evictable() const;

 private:
  struct Key {
    std::uint64_t parent = kRoot;
    std::vector<int> tokens;
    bool operator<(const Key& o) const {
      return std::tie(parent, tokens) < std::tie(o.parent, o.tokens);
    }
  };
  struct Entry {
    PrefixHit hit;            // the indexed block and its chain id
    std::vector<int> copies;  // other live blocks with the same content, newest last
  };
  using Entries = std::map<Key, Entry>;
  Entries entries_;                                      // content -> its blocks
  std::unordered_map<int, Entries::iterator> entry_of_;  // every block of every entry
  std::uint64_t next_chain_ = kRoot + 1;                 // never reused
  std::list<int> lru_;  // evictable blocks, least recently used first
  std::unordered_map<int, std::list<int>::iterator> lru_pos_;
};

}  // namespace kvheap::ch04
