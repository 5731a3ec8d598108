#include "chapters/05_batched_scheduler/continuous_batching.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fmt/ostream.h>

#include <algorithm>
#include <ostream>
#include <stdexcept>

#include "base/error.hpp"
#include "chapters/04_cow_prefix_sharing/admission.hpp"

namespace kvheap::ch05 {

ContinuousBatching::ContinuousBatching(std::unique_ptr<ch04::SharedCache> cache,
                                       const ModelConfig& config, DType kv, PoolSize pool,
                                       SchedulerConfig limits)
    : cache_(std::move(cache)),
      scheduler_(cache_->blocks(), limits),
      config_(config),
      bytes_per_token_(kv_bytes_per_token(config, kv)),
      pool_(pool),
      limits_(limits) {}

void ContinuousBatching::submit(int id, const Request& request) {
  if (request.fork_of >= 0)
    throw UsageError("continuous batching serves requests of their own prompts, not forks");
  const int own = scheduler_.submit(request.prompt, request.max_new_tokens);
  if (own != static_cast<int>(request_of_.size()) || id < 0)
    throw std::logic_error(fmt::format("continuous batching: request {} got id {}", id, own));
  request_of_.push_back(id);
  if (static_cast<int>(own_of_.size()) <= id) own_of_.resize(static_cast<std::size_t>(id) + 1, -1);
  own_of_[id] = own;
}

int ContinuousBatching::own_id(int request) const {
  if (request < 0 || request >= static_cast<int>(own_of_.size()) || own_of_[request] < 0)
    throw std::logic_error(
        fmt::format("continuous batching: request {} was never submitted", request));
  return own_of_[request];
}

StepPlan ContinuousBatching::schedule() {
  StepPlan plan = scheduler_.schedule();
  for (int& r : plan.logit_requests) r = request_of_[r];
  for (int& r : plan.admitted) r = request_of_[r];
  for (auto& refused : plan.refused) refused.first = request_of_[refused.first];
  return plan;
}

PolicySnapshot ContinuousBatching::snapshot() const {
  const ch04::SharedBlockManager& b = cache_->blocks();
  const std::size_t block_bytes =
      static_cast<std::size_t>(b.pool().block_size()) * bytes_per_token_;
  const std::size_t cached = b.index().num_evictable() * block_bytes;
  return {scheduler_.num_running(),
          {static_cast<std::size_t>(b.blocks_held()) * block_bytes,
           b.slots_stored() * bytes_per_token_ - cached},
          ch04::occupancy(b, bytes_per_token_)};
}

PolicyStats ContinuousBatching::stats() const {
  const SchedulerCounters& k = scheduler_.counters();
  PolicyStats s{.budget_bytes = pool_.budget_bytes,
                .mixed_passes = true,
                .counters = {.preemptions = k.preemptions, .positions_reused = k.positions_reused},
                .scheduler = SchedulerStats{.counters = k,
                                            .max_batch_tokens = limits_.max_batch_tokens,
                                            .max_running = limits_.max_running,
                                            .block_size = cache_->blocks().pool().block_size(),
                                            .blocks_total = pool_.num_blocks},
                .others = {.preemptions = 0}};  // never submitted: max_new_tokens 0
  for (const int own : own_of_)
    s.requests.push_back({.preemptions = own >= 0 ? scheduler_.preemptions(own) : 0});
  return s;
}

void ContinuousBatching::check_drained() const {
  const ch04::SharedBlockManager& b = cache_->blocks();
  b.check_invariants();
  if (b.pool().num_used() != static_cast<int>(b.index().size()))
    throw std::logic_error("blocks leaked after every request finished");
}

}  // namespace kvheap::ch05
