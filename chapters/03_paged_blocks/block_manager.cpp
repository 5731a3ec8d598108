#include "chapters/03_paged_blocks/block_manager.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include "base/error.hpp"

namespace kvheap::ch03 {

BlockManager::BlockManager(int num_blocks, int block_size, std::uint64_t shuffle_seed)
    : pool_(num_blocks, block_size, shuffle_seed) {}

long BlockManager::blocks_for(long num_tokens) const { return pool_.blocks_for(num_tokens); }

bool BlockManager::can_allocate(long num_tokens) const {
  return pool_.can_allocate(blocks_for(num_tokens));
}

int BlockManager::allocate(long num_tokens) {
  const long need = blocks_for(num_tokens);
  if (!pool_.can_allocate(need))
    throw ResourceError(
        fmt::format("cannot admit a sequence of {} tokens: it needs {} blocks of "
                    "{} slots and only {} of {} are free",
                    num_tokens, need, pool_.block_size(), pool_.num_free(), pool_.num_blocks()));
  // Everything that can throw (the vectors growing) happens before the first block leaves the
  // pool, so a failure leaves no block unowned and no half-admitted sequence.
  const int id = seqs_.next_id();
  Sequence s;
  s.blocks.reserve(static_cast<std::size_t>(need));
  for (long i = 0; i < need; ++i) s.blocks.push_back(pool_.allocate());  // cannot run out: checked
  seqs_.add(id, std::move(s));
  return id;
}

bool BlockManager::can_append(int seq) const {
  const Sequence& s = seqs_.at(seq, "can_append");
  const bool room = s.length < static_cast<long>(s.blocks.size()) * pool_.block_size();
  return room || pool_.can_allocate(1);
}

std::int64_t BlockManager::append_slot(int seq) {
  Sequence& s = seqs_.at(seq, "append_slot");
  if (s.length == static_cast<long>(s.blocks.size()) * pool_.block_size()) {
    if (!pool_.can_allocate(1))
      throw ResourceError(fmt::format(
          "block pool exhausted: sequence {} needs a new block for position {} and all {} blocks "
          "are in use",
          seq, s.length, pool_.num_blocks()));
    // The page table grows first (that may throw), then takes the block (that cannot).
    s.blocks.push_back(-1);
    s.blocks.back() = pool_.allocate();
  }
  return slot_of(seq, s.length++);
}

std::int64_t BlockManager::slot_of(int seq, int pos) const {
  const Sequence& s = seqs_.at(seq, "slot_of");
  const int bs = pool_.block_size();
  if (pos < 0 || pos >= static_cast<long>(s.blocks.size()) * bs)
    throw InputError(
        fmt::format("position {} of sequence {} has no block (its page table holds "
                    "{} blocks of {})",
                    pos, seq, s.blocks.size(), bs));
  return static_cast<std::int64_t>(s.blocks[pos / bs]) * bs + pos % bs;
}

void BlockManager::free(int seq) {
  for (int b : seqs_.at(seq, "free").blocks) pool_.release(b);
  seqs_.remove(seq);
}

bool BlockManager::is_live(int seq) const { return seqs_.is_live(seq); }

int BlockManager::length(int seq) const { return seqs_.at(seq, "length").length; }

const std::vector<int>& BlockManager::page_table(int seq) const {
  return seqs_.at(seq, "page_table").blocks;
}

std::vector<int> BlockManager::live_sequences() const { return seqs_.live_ids(); }

std::size_t BlockManager::slots_held() const {
  return static_cast<std::size_t>(pool_.num_used()) * pool_.block_size();
}

std::size_t BlockManager::tokens_held() const {
  std::size_t n = 0;
  for (const Sequence& s : seqs_.all()) n += s.live ? s.length : 0;
  return n;
}

void BlockManager::check_invariants() const {
  pool_.check_invariants();
  std::vector<int> owners(pool_.num_blocks(), 0);
  seqs_.check_hint();
  for (std::size_t id = 0; id < seqs_.all().size(); ++id) {
    const Sequence& s = seqs_.all()[id];
    if (!s.live) {
      if (!s.blocks.empty())
        throw std::logic_error(fmt::format("dead sequence {} holds blocks", id));
      continue;
    }
    if (s.length > static_cast<long>(s.blocks.size()) * pool_.block_size())
      throw std::logic_error(fmt::format("sequence {} has length {} beyond its {} blocks", id,
                                         s.length, s.blocks.size()));
    for (int b : s.blocks) ++owners[b];
  }
  int used = 0;
  for (int b = 0; b < pool_.num_blocks(); ++b) {
    if (owners[b] != pool_.ref_count(b))
      throw std::logic_error(fmt::format("block {} has {} page-table owners but reference count {}",
                                         b, owners[b], pool_.ref_count(b)));
    if (owners[b] > 1)
      throw std::logic_error(
          fmt::format("block {} is owned by {} page-table entries", b, owners[b]));
    used += owners[b] > 0 ? 1 : 0;
  }
  if (used != pool_.num_used() || used + pool_.num_free() != pool_.num_blocks())
    throw std::logic_error(
        fmt::format("used {} + free {} != total {}", used, pool_.num_free(), pool_.num_blocks()));
}

}  // namespace kvheap::ch03
