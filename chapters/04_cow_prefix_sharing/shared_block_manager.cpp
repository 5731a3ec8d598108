#include "chapters/04_cow_prefix_sharing/shared_block_manager.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

#include "base/error.hpp"

namespace kvheap::ch04 {

SharedBlockManager::SharedBlockManager(int num_blocks, int block_size, std::uint64_t shuffle_seed)
    : pool_(num_blocks, block_size, shuffle_seed) {}

long SharedBlockManager::blocks_for(long num_tokens) const { return pool_.blocks_for(num_tokens); }

long SharedBlockManager::num_available() const {
  return pool_.num_free() + static_cast<long>(index_.num_evictable());
}

std::vector<int> SharedBlockManager::cached_prefix(std::span<const int> prompt) const {
  const long bs = pool_.block_size();
  const long most = prompt.empty() ? 0 : static_cast<long>(prompt.size() - 1) / bs;
  std::uint64_t chain = PrefixIndex::kRoot;
  std::vector<int> found;
  for (long n = 0; n < most; ++n) {
    const auto hit = index_.find(chain, prompt.subspan(n * bs, bs));
    if (!hit) break;
    found.push_back(hit->block);
    chain = hit->chain;
  }
  return found;
}

long SharedBlockManager::cached_blocks(std::span<const int> prompt) const {
  return static_cast<long>(cached_prefix(prompt).size());
}

long SharedBlockManager::cached_evictable_blocks(std::span<const int> prompt) const {
  const std::vector<int> found = cached_prefix(prompt);
  return std::count_if(found.begin(), found.end(), [&](int b) { return index_.is_evictable(b); });
}

int SharedBlockManager::allocate(std::span<const int> prompt) {
  // Everything that can throw (building the new table) happens before the first reference is
  // taken, so a failure leaves the pool and the index as they were.
  const long bs = pool_.block_size();
  const long n = cached_blocks(prompt);
  Sequence s;
  s.live = true;
  s.tokens.assign(prompt.begin(), prompt.begin() + n * bs);
  for (long i = 0; i < n; ++i) {
    const PrefixHit hit = *index_.find(s.chain, prompt.subspan(i * bs, bs));
    s.blocks.push_back(hit.block);
    s.chain = hit.chain;
  }
  const int id = seqs_.next_id();
  for (int b : s.blocks) retain(b);
  seqs_.add(id, std::move(s));
  counters_.tokens_reused += n * bs;
  return id;
}

int SharedBlockManager::fork(int parent) {
  Sequence child = seqs_.at(parent, "fork");  // a copy: same tokens, same page table
  const int id = seqs_.next_id();             // may move the records, so after the copy
  for (int b : child.blocks) retain(b);
  seqs_.add(id, std::move(child));
  ++counters_.forks;
  return id;
}

long SharedBlockManager::blocks_to_grow(int seq, long rows) const {
  const Sequence& s = seqs_.at(seq, "blocks_to_grow");
  const long len = static_cast<long>(s.tokens.size());
  long need = blocks_for(len + rows) - static_cast<long>(s.blocks.size());
  if (len % pool_.block_size() != 0 && pool_.ref_count(s.blocks.back()) > 1) ++need;
  return need;
}

bool SharedBlockManager::can_append(int seq) const {
  return blocks_to_grow(seq, 1) <= num_available();
}

std::int64_t SharedBlockManager::append_slot(int seq, int token) {
  Sequence& s = seqs_.at(seq, "append_slot");
  const int bs = pool_.block_size();
  const long len = static_cast<long>(s.tokens.size());
  const bool full = len == static_cast<long>(s.blocks.size()) * bs;
  if ((full || pool_.ref_count(s.blocks.back()) > 1) && num_available() == 0)
    throw ResourceError(fmt::format(
        "block pool exhausted: sequence {} needs a {} for position {} and all {} blocks are in "
        "use, none of them only cached",
        seq, full ? "new block" : "private copy of its shared last block", len,
        pool_.num_blocks()));
  // Room first (the only steps that can throw), then the changes, which cannot fail.
  s.tokens.reserve(s.tokens.size() + 1);
  s.blocks.reserve(s.blocks.size() + 1);
  copies_.reserve(copies_.size() + 1);
  if (full) {
    s.blocks.push_back(take_block());
  } else if (pool_.ref_count(s.blocks.back()) > 1) {
    // Copy-on-write: the other holders keep the block as it is; this sequence continues in a
    // private copy of the positions written so far.
    const int shared = s.blocks.back();
    const int own = take_block();
    copies_.push_back({shared, own, static_cast<int>(len % bs)});
    release(shared);
    s.blocks.back() = own;
    ++counters_.copies_on_write;
  }
  s.tokens.push_back(token);
  if ((len + 1) % bs == 0) index_full_block(s);
  return static_cast<std::int64_t>(s.blocks.back()) * bs + len % bs;
}

void SharedBlockManager::index_full_block(Sequence& s) {
  const int bs = pool_.block_size();
  const std::size_t i = s.tokens.size() / bs - 1;
  const std::span<const int> content(s.tokens.data() + i * bs, bs);
  // Another sequence may have computed the same content into its own block (two prompts that
  // begin alike, prefilled side by side). This one then joins the key as a copy, and the chain
  // continues under the key's name; should the indexed block be evicted while the copy lives, the
  // copy takes its place (take_block).
  if (const auto hit = index_.find(s.chain, content)) {
    s.chain = hit->chain;
    index_.add_copy(hit->block, s.blocks[i]);
    return;
  }
  s.chain = index_.insert(s.chain, content, s.blocks[i]);
  pool_.retain(s.blocks[i]);  // the index's own reference
}

std::int64_t SharedBlockManager::slot_of(int seq, int pos) const {
  const Sequence& s = seqs_.at(seq, "slot_of");
  const int bs = pool_.block_size();
  if (pos < 0 || pos >= static_cast<long>(s.tokens.size()))
    throw InputError(fmt::format("position {} of sequence {} is not held (it holds {})", pos, seq,
                                 s.tokens.size()));
  return static_cast<std::int64_t>(s.blocks[pos / bs]) * bs + pos % bs;
}

std::vector<BlockCopy> SharedBlockManager::take_copies() { return std::exchange(copies_, {}); }

void SharedBlockManager::free(int seq) {
  Sequence& s = seqs_.at(seq, "free");
  // Last block first: cached blocks join the eviction order tail before head, so a prefix loses
  // its end before its beginning, which more prompts share.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) release(*it);
  seqs_.remove(seq);
}

int SharedBlockManager::take_block() {
  if (pool_.num_free() == 0) {
    const int victim = index_.oldest_evictable();  // callers checked num_available()
    // A live copy of the victim takes its place in the index; the index's reference moves to it
    // (a sequence holds it, so it is not evictable).
    if (const std::optional<int> heir = index_.evict(victim)) pool_.retain(*heir);
    pool_.release(victim);
    ++counters_.evictions;
  }
  return pool_.allocate();
}

void SharedBlockManager::retain(int block) {
  if (index_.is_evictable(block)) index_.remove_evictable(block);
  pool_.retain(block);
}

void SharedBlockManager::release(int block) {
  pool_.release(block);
  if (index_.contains(block) && pool_.ref_count(block) == 1) index_.push_evictable(block);
  if (pool_.ref_count(block) == 0) index_.forget(block);  // a copy leaves its key
}

bool SharedBlockManager::is_live(int seq) const { return seqs_.is_live(seq); }

int SharedBlockManager::length(int seq) const {
  return static_cast<int>(seqs_.at(seq, "length").tokens.size());
}

const std::vector<int>& SharedBlockManager::tokens(int seq) const {
  return seqs_.at(seq, "tokens").tokens;
}

const std::vector<int>& SharedBlockManager::page_table(int seq) const {
  return seqs_.at(seq, "page_table").blocks;
}

std::vector<int> SharedBlockManager::live_sequences() const { return seqs_.live_ids(); }

long SharedBlockManager::blocks_held() const {
  std::vector<char> held(pool_.num_blocks(), 0);
  long n = 0;
  for (const Sequence& s : seqs_.all())
    for (int b : s.blocks) n += held[b]++ == 0 ? 1 : 0;
  return n;
}

long SharedBlockManager::blocks_referenced() const {
  long n = 0;
  for (const Sequence& s : seqs_.all()) n += static_cast<long>(s.blocks.size());
  return n;
}

std::size_t SharedBlockManager::tokens_held() const {
  std::size_t n = 0;
  for (const Sequence& s : seqs_.all()) n += s.tokens.size();
  return n;
}

std::size_t SharedBlockManager::slots_stored() const {
  // A shared block holds as many positions as its longest holder put in it (the holders agree
  // on those positions; that is why they can share it).
  const int bs = pool_.block_size();
  std::vector<int> filled(pool_.num_blocks(), 0);
  for (const Sequence& s : seqs_.all())
    for (std::size_t i = 0; i < s.blocks.size(); ++i) {
      const long in_block = static_cast<long>(s.tokens.size()) - static_cast<long>(i) * bs;
      int& f = filled[s.blocks[i]];
      f = std::max(f, static_cast<int>(std::min<long>(in_block, bs)));
    }
  std::size_t n = index_.num_evictable() * static_cast<std::size_t>(bs);
  for (int f : filled) n += f;
  return n;
}

void SharedBlockManager::check_invariants() const {
  pool_.check_invariants();
  const int bs = pool_.block_size();
  std::vector<int> owners(pool_.num_blocks(), 0);
  seqs_.check_hint();
  for (std::size_t id = 0; id < seqs_.all().size(); ++id) {
    const Sequence& s = seqs_.all()[id];
    if (!s.live) {
      if (!s.blocks.empty() || !s.tokens.empty())
        throw std::logic_error(fmt::format("dead sequence {} holds blocks or tokens", id));
      continue;
    }
    const long len = static_cast<long>(s.tokens.size());
    if (static_cast<long>(s.blocks.size()) != blocks_for(len))
      throw std::logic_error(fmt::format("sequence {} has {} positions in {} blocks of {}", id, len,
                                         s.blocks.size(), bs));
    for (std::size_t i = 0; i < s.blocks.size(); ++i) {
      const int b = s.blocks[i];
      ++owners[b];
      if (index_.contains(b) && static_cast<long>(i + 1) * bs > len)
        throw std::logic_error(
            fmt::format("block {} is indexed but not full in sequence {}", b, id));
    }
  }
  std::size_t evictable = 0;
  for (int b = 0; b < pool_.num_blocks(); ++b) {
    const int want = owners[b] + (index_.contains(b) ? 1 : 0);
    if (pool_.ref_count(b) != want)
      throw std::logic_error(fmt::format(
          "block {} has reference count {} but {} page-table entries{}", b, pool_.ref_count(b),
          owners[b], index_.contains(b) ? " and the index's reference" : ""));
    const bool should_be_evictable = index_.contains(b) && owners[b] == 0;
    if (index_.is_evictable(b) != should_be_evictable)
      throw std::logic_error(
          fmt::format("block {} is {}evictable but {}", b, index_.is_evictable(b) ? "" : "not ",
                      should_be_evictable ? "only the index holds it" : "a sequence holds it"));
    evictable += should_be_evictable ? 1 : 0;
  }
  for (const auto& [copy, indexed] : index_.copies())
    if (!index_.contains(indexed) || index_.contains(copy) || owners[copy] == 0)
      throw std::logic_error(fmt::format(
          "block {} is listed as a copy of indexed block {} but is not a held, unindexed block",
          copy, indexed));
  if (evictable != index_.num_evictable())
    throw std::logic_error(fmt::format("{} blocks are evictable but the list holds {}", evictable,
                                       index_.num_evictable()));
}

}  // namespace kvheap::ch04
