// Admission by worst case in blocks (chapter 3): a request is admitted only if the pool can hold
// every position it may store, prompt + max_new_tokens - 1, on top of the worst cases already
// admitted, so no running sequence can run out of blocks. What does not fit waits for the next
// batch (one whose worst case exceeds the whole pool is turned away); preemption, which would let
// more in, is chapter 5's.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "chapters/03_paged_blocks/paged_cache.hpp"
#include "chapters/03_paged_blocks/pool_report.hpp"
#include "common/program/kv_budget.hpp"
#include "common/serving/static_batches.hpp"

namespace kvheap::ch03 {

/// \brief Static batches over a paged cache, admitted by their worst case in blocks.
class WorstCaseAdmission final : public StaticBatches {
 public:
  /// \brief Serves over `cache`, cut from `pool`; `pool_map` (when not empty) names the SVG map
  /// of the pool written when the batch ends.
  WorstCaseAdmission(std::unique_ptr<PagedCache> cache, const ModelConfig& config, DType kv,
                     PoolSize pool, std::string pool_map = "");

  /// \brief The next step; counts the passes, for the pool map's title.
  StepPlan schedule() override;
  KVCache& cache() override { return *cache_; }
  /// \brief The allocator, for a picture of the pool.
  [[nodiscard]] const BlockManager& blocks() const { return cache_->blocks(); }
  [[nodiscard]] std::size_t budget_bytes() const override { return pool_.budget_bytes; }
  /// \brief Blocks in use are held, the free list is free: the pool, whole.
  KvOccupancy occupancy() override;
  /// \brief Every block is back on the free list and the allocator is sound.
  void check_drained() const override;
  /// \brief "pool": the malloc-style statistics at the end of the batch; "metrics" gains how many
  /// sequences the budget fits under each policy.
  void add_json(nlohmann::json& root, const ServeResult& result) const override;
  void print(std::ostream& os, const ServeResult& result) const override;

 protected:
  bool fits(int id, const Request& request, int forks, std::string& why) override;
  int allocate(int id, const Request& request) override;
  [[nodiscard]] int length(int seq) const override { return cache_->blocks().length(seq); }
  void release(const std::vector<int>& seqs) override;

 private:
  /// \brief Sequences of max_seq_len reservations, and of this run's average blocks, that fit.
  [[nodiscard]] std::pair<int, int> fit_counts() const;

  std::unique_ptr<PagedCache> cache_;
  ModelConfig config_;
  DType kv_;
  PoolSize pool_;
  std::string pool_map_;
  long committed_ = 0;  // worst-case blocks of the admitted requests
  int admitted_ = 0;    // requests of the batch
  int passes_ = 0;      // forward passes so far (for the pool map's title)
  PoolStats stats_;     // at the end of the last batch, before its blocks went back
};

}  // namespace kvheap::ch03
