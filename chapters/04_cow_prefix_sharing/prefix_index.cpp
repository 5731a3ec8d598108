#include "chapters/04_cow_prefix_sharing/prefix_index.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace kvheap::ch04 {

std::optional<PrefixHit> PrefixIndex::find(std::uint64_t parent,
                                           std::span<const int> tokens) const {
  const auto it = entries_.find(Key{parent, {tokens.begin(), tokens.end()}});
  if (it == entries_.end()) return std::nullopt;
  return it->second.hit;
}

std::uint64_t PrefixIndex::insert(std::uint64_t parent, std::span<const int> tokens, int block) {
  if (entry_of_.contains(block))
    throw std::logic_error(fmt::format("prefix index: block {} is indexed already", block));
  const auto [it, added] = entries_.emplace(Key{parent, {tokens.begin(), tokens.end()}},
                                            Entry{PrefixHit{block, next_chain_}, {}});
  if (!added)
    throw std::logic_error(
        fmt::format("prefix index: the content of block {} is indexed already", block));
  entry_of_.emplace(block, it);
  return next_chain_++;
}

void PrefixIndex::add_copy(int indexed, int block) {
  if (!contains(indexed) || entry_of_.contains(block))
    throw std::logic_error(fmt::format(
        "prefix index: block {} cannot be a copy of block {} (in the index already, or block {} "
        "is not indexed)",
        block, indexed, indexed));
  const Entries::iterator it = entry_of_.at(indexed);
  it->second.copies.push_back(block);
  entry_of_.emplace(block, it);
}

std::optional<int> PrefixIndex::evict(int block) {
  if (!contains(block))
    throw std::logic_error(fmt::format("prefix index: block {} is not indexed", block));
  const Entries::iterator it = entry_of_.at(block);
  entry_of_.erase(block);
  if (is_evictable(block)) remove_evictable(block);
  Entry& e = it->second;
  if (e.copies.empty()) {
    entries_.erase(it);
    return std::nullopt;
  }
  // Any copy would do. The newest takes the key (same key, same chain id), and the others' order
  // turns around: the order in which copies were promoted before the index kept them, so that
  // every run's numbers stay what they were.
  e.hit.block = e.copies.back();
  e.copies.pop_back();
  std::reverse(e.copies.begin(), e.copies.end());
  return e.hit.block;
}

void PrefixIndex::forget(int block) {
  const auto it = entry_of_.find(block);
  if (it == entry_of_.end() || it->second->second.hit.block == block) return;
  std::erase(it->second->second.copies, block);
  entry_of_.erase(it);
}

std::vector<std::pair<int, int>> PrefixIndex::copies() const {
  std::vector<std::pair<int, int>> out;
  for (const auto& [key, e] : entries_)
    for (const int c : e.copies) out.emplace_back(c, e.hit.block);
  return out;
}

void PrefixIndex::push_evictable(int block) {
  if (!contains(block) || is_evictable(block))
    throw std::logic_error(fmt::format(
        "prefix index: block {} cannot become evictable (not indexed, or already)", block));
  lru_pos_.emplace(block, lru_.insert(lru_.end(), block));
}

void PrefixIndex::remove_evictable(int block) {
  const auto it = lru_pos_.find(block);
  if (it == lru_pos_.end())
    throw std::logic_error(fmt::format("prefix index: block {} is not evictable", block));
  lru_.erase(it->second);
  lru_pos_.erase(it);
}

int PrefixIndex::oldest_evictable() const {
  if (lru_.empty()) throw std::logic_error("prefix index: no block is evictable");
  return lru_.front();
}

}  // namespace kvheap::ch04
