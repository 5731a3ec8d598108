// Admission with sharing (chapter 4): how many blocks a request can take at most, counting what
// it will share, and the static batches that prefill one prompt per pass and fork its samples.
//
// Chapter 3 admits a sequence when the pool can hold its worst case. With sharing, that worst case
// shrinks twice: the prompt's full blocks that an earlier prompt already fills are taken from the
// prefix index, and the --samples forks of one prompt share all of its full blocks. What each
// sample can still take alone is everything after them:
//
//   need = (full prompt blocks - reused) + samples x (blocks_for(prompt + new - 1) - full prompt
//   blocks)
//
// The second term holds each sample's copy of the prompt's last, partly filled block
// (copy-on-write) and the blocks its generated tokens fill.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "common/program/kv_budget.hpp"
#include "common/serving/static_batches.hpp"

namespace kvheap::ch04 {

/// \brief Leading full blocks of `block_size` tokens that `a` and `b` hold alike.
[[nodiscard]] long common_full_blocks(std::span<const int> a, std::span<const int> b,
                                      int block_size);

/// \brief What admitting one request commits.
struct RequestPlan {
  long reused_blocks = 0;  ///< prompt blocks the prefix index will supply
  long need = 0;           ///< blocks it can take at most, beyond those
};

/// \brief The plan of a request whose prompt is `prompt`, forked into `samples` sequences that each
/// generate up to `max_new_tokens`, admitted after the prompts `earlier` (whose full blocks the
/// prefix index will hold by the time this one is prefilled). The last prompt token is always
/// computed, so at most (prompt.size() - 1) / block_size blocks are reused.
[[nodiscard]] RequestPlan plan_request(std::span<const int> prompt,
                                       const std::vector<std::vector<int>>& earlier, int samples,
                                       int max_new_tokens, int block_size);

/// \brief The pool of `blocks` by what holds it: blocks of live sequences (each shared one once),
/// blocks only the prefix index keeps, and the free list; `bytes_per_token` of K and V a position.
[[nodiscard]] KvOccupancy occupancy(const SharedBlockManager& blocks, std::size_t bytes_per_token);

/// \brief Each prompt of `requests` as `samples` requests: the prompt's own, then samples - 1
/// forks of it (Request::fork_of). Throws UsageError for a count outside 1..kMaxSeqs, or more
/// than kMaxSeqs requests in all.
std::vector<Request> with_samples(const std::vector<Request>& requests, int samples);

/// \brief Admission for static batches over a sharing cache, by worst case net of sharing. The
/// batches prefill one prompt per pass (StaticBatches::Options), so that each finds the full
/// blocks of the prompts before it in the prefix index; a prompt's samples fork from it after its
/// pass.
class SharingAdmission final : public BatchAdmission {
 public:
  /// \brief Serves over `cache`, cut from `pool`.
  SharingAdmission(std::unique_ptr<SharedCache> cache, const ModelConfig& config, DType kv,
                   PoolSize pool);

  KVCache& cache() override { return *cache_; }
  /// \brief Admits while the batch's needs, net of what its prompts share, fit the pool.
  bool fits(int id, const Request& request, int forks, std::string& why) override;
  /// \brief A sequence that starts with what the prefix index holds of the prompt.
  int allocate(int id, const Request& request) override;
  [[nodiscard]] int length(int seq) const override { return cache_->blocks().length(seq); }
  int fork(int seq) override { return cache_->blocks().fork(seq); }
  /// \brief Keeps the largest batch's blocks for the report, then frees the batch.
  void release(const std::vector<int>& seqs, long passes) override;
  KvOccupancy occupancy() override;
  /// \brief What sharing saved in positions computed and blocks stored.
  [[nodiscard]] PolicyStats stats() const override;
  /// \brief The index of the request's prompt and the prompt positions it took from the index.
  [[nodiscard]] RequestStats request_stats(int id) const override;
  /// \brief Only the prefix index holds blocks once every sequence has been freed.
  void check_drained() const override;

 private:
  std::unique_ptr<SharedCache> cache_;
  ModelConfig config_;
  DType kv_;
  PoolSize pool_;
  long committed_ = 0;
  std::vector<std::vector<int>> admitted_prompts_;  // in admission order
  int prompts_seen_ = 0;
  std::unordered_map<int, int> prompt_of_;        // request with a prompt of its own -> its index
  std::unordered_map<int, int> reused_;           // the same -> prompt positions from the index
  long prompt_positions_ = 0;                     // prompt positions of the prefilled prompts
  long blocks_held_ = 0, blocks_referenced_ = 0;  // at the end of the largest batch
};

}  // namespace kvheap::ch04
