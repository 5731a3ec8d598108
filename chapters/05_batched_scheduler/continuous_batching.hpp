// Chapter 5's serving policy: the Scheduler over chapter 4's sharing cache, as the serving loop
// drives it, and what the report says about it.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "chapters/05_batched_scheduler/scheduler.hpp"
#include "common/program/kv_budget.hpp"
#include "common/serving/serve.hpp"

namespace kvheap::ch05 {

/// \brief Continuous batching: every step, decode rows, prompt chunks and admissions by free
/// blocks, with preemption when the pool runs out (Scheduler), over a sharing cache.
class ContinuousBatching final : public ServingPolicy {
 public:
  /// \brief Serves over `cache`, cut from `pool`, within `limits`.
  ContinuousBatching(std::unique_ptr<ch04::SharedCache> cache, const ModelConfig& config, DType kv,
                     PoolSize pool, SchedulerConfig limits);

  void submit(int id, const Request& request) override;
  StepPlan schedule() override;
  void append(int request, int token) override { scheduler_.append(own_id(request), token); }
  void finish(int request) override { scheduler_.finish(own_id(request)); }
  [[nodiscard]] bool idle() const override { return scheduler_.idle(); }
  [[nodiscard]] int running() const override { return scheduler_.num_running(); }
  KVCache& cache() override { return *cache_; }
  /// \brief The scheduler, for its counters.
  [[nodiscard]] const Scheduler& scheduler() const { return scheduler_; }

  /// \brief What running requests hold: the blocks of their sequences, and the positions in them
  /// (each shared one once). Blocks the prefix index keeps of finished requests are counted apart.
  KvUsage usage() override;
  [[nodiscard]] std::size_t budget_bytes() const override { return pool_.budget_bytes; }
  KvOccupancy occupancy() override;
  /// \brief The scheduler's preemptions and positions taken from the prefix index (a preempted
  /// request's own blocks included).
  [[nodiscard]] PolicyCounters counters() const override;
  /// \brief Only the prefix index holds blocks once every request has finished.
  void check_drained() const override;
  [[nodiscard]] bool mixed_passes() const override { return true; }
  /// \brief "preemptions" of the request.
  void add_request_json(int request, nlohmann::json& entry) const override;
  /// \brief "scheduler": what the scheduler did; "metrics" gains the cached blocks' peak.
  void add_json(nlohmann::json& root, const ServeResult& result) const override;
  [[nodiscard]] std::string describe_request(int request) const override;
  void print(std::ostream& os, const ServeResult& result) const override;

 private:
  std::unique_ptr<ch04::SharedCache> cache_;
  Scheduler scheduler_;
  ModelConfig config_;
  std::size_t bytes_per_token_;
  PoolSize pool_;
  SchedulerConfig limits_;
  std::size_t peak_cached_ = 0;  // most bytes the prefix index kept of finished requests
  // The scheduler numbers the requests it is given from 0; the loop never gives it one with no
  // token to generate, so its ids and the run's part there.
  std::vector<int> request_of_;  // scheduler id -> the run's request id
  std::vector<int> own_of_;      // the run's request id -> scheduler id; -1: never submitted

  /// The scheduler's id of request `request`; throws std::logic_error for one never submitted.
  [[nodiscard]] int own_id(int request) const;
};

}  // namespace kvheap::ch05
