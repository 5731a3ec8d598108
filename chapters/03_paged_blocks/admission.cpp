#include "chapters/03_paged_blocks/admission.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <utility>

#include "chapters/03_paged_blocks/pool_map.hpp"

namespace kvheap::ch03 {
namespace {

// A snapshot of `m`'s pool, for a model whose sequences could reach max_seq_len.
PoolStats pool_stats(const BlockManager& m, const ModelConfig& c, DType kv) {
  PoolStats s;
  s.blocks_total = m.pool().num_blocks();
  s.blocks_used = m.pool().num_used();
  s.blocks_free = m.pool().num_free();
  s.block_size = m.pool().block_size();
  s.tokens = m.tokens_held();
  s.slots_held = m.slots_held();
  s.bytes_per_token = kv_bytes_per_token(c, kv);
  for (int seq : m.live_sequences()) {
    ++s.sequences;
    s.largest_page_table =
        std::max(s.largest_page_table, static_cast<int>(m.page_table(seq).size()));
  }
  s.reservation_slots = static_cast<std::size_t>(s.sequences) * c.max_seq_len;
  return s;
}

}  // namespace

WorstCaseAdmission::WorstCaseAdmission(std::unique_ptr<PagedCache> cache, const ModelConfig& config,
                                       DType kv, PoolSize pool, std::string pool_map)
    : cache_(std::move(cache)),
      config_(config),
      kv_(kv),
      pool_(pool),
      pool_map_(std::move(pool_map)),
      stats_(pool_stats(cache_->blocks(), config, kv)) {}

bool WorstCaseAdmission::fits(int id, const Request& r, int, std::string& why) {
  const long need =
      cache_->blocks().blocks_for(positions_stored(r.prompt.size(), r.max_new_tokens));
  const int num_blocks = cache_->blocks().pool().num_blocks();
  if (committed_ + need > num_blocks) {
    why = fmt::format(
        "sequence {} not admitted: its worst case needs {} blocks and the whole pool holds {}", id,
        need, num_blocks);
    return false;
  }
  committed_ += need;
  ++admitted_;
  return true;
}

int WorstCaseAdmission::allocate(int, const Request&) { return cache_->blocks().allocate(0); }

void WorstCaseAdmission::release(const std::vector<int>& seqs, long passes) {
  // The snapshot the report shows: every sequence of the batch still holds its blocks.
  stats_ = pool_stats(cache_->blocks(), config_, kv_);
  if (!pool_map_.empty())
    write_pool_map(cache_->blocks(), pool_map_,
                   fmt::format("{} after {} steps", config_.name, passes));
  for (const int s : seqs) cache_->blocks().free(s);
  committed_ = 0;
}

KvOccupancy WorstCaseAdmission::occupancy() {
  const BlockPool& p = cache_->blocks().pool();
  const std::size_t block =
      static_cast<std::size_t>(p.block_size()) * kv_bytes_per_token(config_, kv_);
  return {static_cast<std::size_t>(p.num_used()) * block, 0,
          static_cast<std::size_t>(p.num_free()) * block};
}

PolicyStats WorstCaseAdmission::stats() const {
  PagingStats paging{.pool = stats_, .num_blocks = pool_.num_blocks};
  // Sequences of max_seq_len reservations, and of this run's average blocks, that fit.
  const std::size_t reservation = kv_bytes_for_context(config_, kv_, config_.max_seq_len);
  paging.blocks_per_seq = admitted_ > 0 ? static_cast<double>(stats_.blocks_used) / admitted_ : 0.0;
  paging.fit_contiguous = static_cast<int>(pool_.budget_bytes / reservation);
  paging.fit_paged =
      paging.blocks_per_seq > 0 ? static_cast<int>(pool_.num_blocks / paging.blocks_per_seq) : 0;
  return {.budget_bytes = pool_.budget_bytes, .paging = paging};
}

void WorstCaseAdmission::check_drained() const {
  const BlockManager& b = cache_->blocks();
  b.check_invariants();
  if (b.pool().num_free() != b.pool().num_blocks())
    throw std::logic_error("blocks leaked after every sequence finished");
}

}  // namespace kvheap::ch03
