// Chapter 5's serving policy: the Scheduler over chapter 4's sharing cache, as the serving loop
// drives it, and what it counts for the report.
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
  KVCache& cache() override { return *cache_; }
  /// \brief The scheduler, for its counters.
  [[nodiscard]] const Scheduler& scheduler() const { return scheduler_; }
  /// \brief What running requests hold: the blocks of their sequences, and the positions in them
  /// (each shared one once). Blocks the prefix index keeps of finished requests are counted apart.
  [[nodiscard]] PolicySnapshot snapshot() const override;
  /// \brief What the scheduler did, and each request's preemptions.
  [[nodiscard]] PolicyStats stats() const override;
  /// \brief Only the prefix index holds blocks once every request has finished.
  void check_drained() const override;

 private:
  std::unique_ptr<ch04::SharedCache> cache_;
  Scheduler scheduler_;
  ModelConfig config_;
  std::size_t bytes_per_token_;
  PoolSize pool_;
  SchedulerConfig limits_;
  // The scheduler numbers the requests it is given from 0; the loop never gives it one with no
  // token to generate, so its ids and the run's part there.
  std::vector<int> request_of_;  // scheduler id -> the run's request id
  std::vector<int> own_of_;      // the run's request id -> scheduler id; -1: never submitted

  /// The scheduler's id of request `request`; throws std::logic_error for one never submitted.
  [[nodiscard]] int own_id(int request) const;
};

}  // namespace kvheap::ch05
