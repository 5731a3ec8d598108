#include "chapters/04_cow_prefix_sharing/prefix_index.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace kvheap::ch04 {

std::optional<PrefixHit> PrefixIndex::find(std::uint64_t parent,
                                           std::span<const int> tokens) const {
  const auto it = blocks_.find(Key{parent, {tokens.begin(), tokens.end()}});
  if (it == blocks_.end()) return std::nullopt;
  return it->second;
}

std::uint64_t PrefixIndex::insert(std::uint64_t parent, std::span<const int> tokens, int block) {
  if (contains(block))
    throw std::logic_error(fmt::format("prefix index: block {} is indexed already", block));
  Key key{parent, {tokens.begin(), tokens.end()}};
  const PrefixHit hit{block, next_chain_};
  if (!blocks_.emplace(key, hit).second)
    throw std::logic_error(
        fmt::format("prefix index: the content of block {} is indexed already", block));
  key_of_.emplace(block, std::move(key));
  return next_chain_++;
}

void PrefixIndex::erase(int block) {
  const auto it = key_of_.find(block);
  if (it == key_of_.end())
    throw std::logic_error(fmt::format("prefix index: block {} is not indexed", block));
  blocks_.erase(it->second);
  key_of_.erase(it);
  if (is_evictable(block)) remove_evictable(block);
}

void PrefixIndex::move_block(int from, int to) {
  const auto it = key_of_.find(from);
  if (it == key_of_.end() || contains(to))
    throw std::logic_error(fmt::format(
        "prefix index: cannot move block {} to block {} (not indexed, or the target is)", from,
        to));
  blocks_.at(it->second).block = to;
  auto node = key_of_.extract(it);
  node.key() = to;
  key_of_.insert(std::move(node));
  if (is_evictable(from)) remove_evictable(from);
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
