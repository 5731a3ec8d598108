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
#include "common/program/kv_budget.hpp"
#include "common/serving/static_batches.hpp"

namespace kvheap::ch03 {

/// \brief Admission for static batches over a paged cache, by worst case in blocks.
class WorstCaseAdmission final : public BatchAdmission {
 public:
  /// \brief Serves over `cache`, cut from `pool`; `pool_map` (when not empty) names the SVG map
  /// of the pool written when the batch ends.
  WorstCaseAdmission(std::unique_ptr<PagedCache> cache, const ModelConfig& config, DType kv,
                     PoolSize pool, std::string pool_map = "");

  KVCache& cache() override { return *cache_; }
  /// \brief The allocator, for a picture of the pool.
  [[nodiscard]] const BlockManager& blocks() const { return cache_->blocks(); }
  /// \brief Admits while the worst cases of the batch fit the pool.
  bool fits(int id, const Request& request, int forks, std::string& why) override;
  int allocate(int id, const Request& request) override;
  [[nodiscard]] int length(int seq) const override { return cache_->blocks().length(seq); }
  /// \brief Takes the pool's statistics (and map) with the batch still in it, then frees it.
  void release(const std::vector<int>& seqs, long passes) override;
  /// \brief Blocks in use are held, the free list is free: the pool, whole.
  KvOccupancy occupancy() override;
  /// \brief The pool at the end of the last batch, and how many sequences the budget fits under
  /// each policy.
  [[nodiscard]] PolicyStats stats() const override;
  /// \brief Every block is back on the free list and the allocator is sound.
  void check_drained() const override;

 private:
  std::unique_ptr<PagedCache> cache_;
  ModelConfig config_;
  DType kv_;
  PoolSize pool_;
  std::string pool_map_;
  long committed_ = 0;  // worst-case blocks of the admitted requests
  int admitted_ = 0;    // requests of the batch
  PoolStats stats_;     // at the end of the last batch, before its blocks went back
};

}  // namespace kvheap::ch03
