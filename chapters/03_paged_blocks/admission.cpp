#include "chapters/03_paged_blocks/admission.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fmt/ostream.h>

#include <ostream>
#include <stdexcept>

#include "chapters/03_paged_blocks/pool_map.hpp"

namespace kvheap::ch03 {

WorstCaseAdmission::WorstCaseAdmission(std::unique_ptr<PagedCache> cache, const ModelConfig& config,
                                       DType kv, PoolSize pool, std::string pool_map)
    : StaticBatches({}),
      cache_(std::move(cache)),
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

StepPlan WorstCaseAdmission::schedule() {
  StepPlan plan = StaticBatches::schedule();
  if (!plan.batch.rows.empty()) ++passes_;
  return plan;
}

KvOccupancy WorstCaseAdmission::occupancy() {
  const BlockPool& p = cache_->blocks().pool();
  const std::size_t block =
      static_cast<std::size_t>(p.block_size()) * kv_bytes_per_token(config_, kv_);
  return {static_cast<std::size_t>(p.num_used()) * block, 0,
          static_cast<std::size_t>(p.num_free()) * block};
}

int WorstCaseAdmission::allocate(int, const Request&) { return cache_->blocks().allocate(0); }

void WorstCaseAdmission::release(const std::vector<int>& seqs) {
  // The snapshot the report shows: every sequence of the batch still holds its blocks.
  stats_ = pool_stats(cache_->blocks(), config_, kv_);
  if (!pool_map_.empty())
    write_pool_map(cache_->blocks(), pool_map_,
                   fmt::format("{} after {} steps", config_.name, passes_));
  for (const int s : seqs) cache_->blocks().free(s);
  committed_ = 0;
}

void WorstCaseAdmission::check_drained() const {
  const BlockManager& b = cache_->blocks();
  b.check_invariants();
  if (b.pool().num_free() != b.pool().num_blocks())
    throw std::logic_error("blocks leaked after every sequence finished");
}

std::pair<int, int> WorstCaseAdmission::fit_counts() const {
  const std::size_t reservation = kv_bytes_for_context(config_, kv_, config_.max_seq_len);
  const double avg_blocks =
      admitted_ > 0 ? static_cast<double>(stats_.blocks_used) / admitted_ : 0.0;
  const int fit_contiguous = static_cast<int>(pool_.budget_bytes / reservation);
  const int fit_paged = avg_blocks > 0 ? static_cast<int>(pool_.num_blocks / avg_blocks) : 0;
  return {fit_contiguous, fit_paged};
}

void WorstCaseAdmission::add_json(nlohmann::json& root, const ServeResult&) const {
  root["pool"] = pool_stats_json(stats_);
  const auto [contiguous, paged] = fit_counts();
  root["metrics"]["sequences_fit_contiguous"] = contiguous;
  // null when nothing was stored: no average to extrapolate from
  root["metrics"]["sequences_fit_paged"] = paged > 0 ? nlohmann::json(paged) : nlohmann::json();
}

void WorstCaseAdmission::print(std::ostream& os, const ServeResult&) const {
  fmt::print(os, "  block size {}, {} blocks cut from the budget\n", stats_.block_size,
             pool_.num_blocks);
  print_pool_stats(stats_, os);
  const auto [contiguous, paged] = fit_counts();
  const double avg = admitted_ > 0 ? static_cast<double>(stats_.blocks_used) / admitted_ : 0.0;
  fmt::print(os,
             "  sequences that fit the budget: {} reserving max_seq_len, {} paged (at this run's "
             "average of {:.1f} blocks per sequence)\n",
             contiguous, paged > 0 ? fmt::format("about {}", paged) : "n/a", avg);
}

}  // namespace kvheap::ch03
