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

KvUsage ContinuousBatching::usage() {
  const ch04::SharedBlockManager& b = cache_->blocks();
  const std::size_t block_bytes =
      static_cast<std::size_t>(b.pool().block_size()) * bytes_per_token_;
  const std::size_t cached = b.index().num_evictable() * block_bytes;
  peak_cached_ = std::max(peak_cached_, cached);
  return {static_cast<std::size_t>(b.blocks_held()) * block_bytes,
          b.slots_stored() * bytes_per_token_ - cached};
}

KvOccupancy ContinuousBatching::occupancy() {
  return ch04::occupancy(cache_->blocks(), bytes_per_token_);
}

PolicyCounters ContinuousBatching::counters() const {
  const SchedulerCounters& k = scheduler_.counters();
  return {.preemptions = k.preemptions, .positions_reused = k.positions_reused};
}

void ContinuousBatching::check_drained() const {
  const ch04::SharedBlockManager& b = cache_->blocks();
  b.check_invariants();
  if (b.pool().num_used() != static_cast<int>(b.index().size()))
    throw std::logic_error("blocks leaked after every request finished");
}

void ContinuousBatching::add_request_json(int request, nlohmann::json& entry) const {
  const bool run = request < static_cast<int>(own_of_.size()) && own_of_[request] >= 0;
  entry["preemptions"] = run ? scheduler_.preemptions(own_of_[request]) : 0;
}

std::string ContinuousBatching::describe_request(int request) const {
  const bool run = request < static_cast<int>(own_of_.size()) && own_of_[request] >= 0;
  return fmt::format(", {} preemptions", run ? scheduler_.preemptions(own_of_[request]) : 0);
}

void ContinuousBatching::add_json(nlohmann::json& root, const ServeResult&) const {
  const SchedulerCounters& k = scheduler_.counters();
  root["scheduler"] = {{"steps", k.steps},
                       {"decode_rows", k.decode_rows},
                       {"prefill_rows", k.prefill_rows},
                       {"recomputed_rows", k.recomputed_rows},
                       {"positions_reused", k.positions_reused},
                       {"admissions", k.admissions},
                       {"preemptions", k.preemptions},
                       {"peak_running", k.peak_running},
                       {"max_batch_tokens", limits_.max_batch_tokens},
                       {"max_running", limits_.max_running},
                       {"block_size", cache_->blocks().pool().block_size()},
                       {"blocks_total", pool_.num_blocks}};
  root["metrics"]["kv_cached_peak_bytes"] = peak_cached_;
}

void ContinuousBatching::print(std::ostream& os, const ServeResult& result) const {
  const SchedulerCounters& k = scheduler_.counters();
  const double steps = static_cast<double>(k.steps);
  const long rows = k.decode_rows + k.prefill_rows;
  fmt::print(os,
             "  steps     : {} forward passes of at most {} rows: {} decode rows, {} prefill rows "
             "({} recomputed after preemption), {:.1f} rows per pass\n",
             k.steps, limits_.max_batch_tokens, k.decode_rows, k.prefill_rows, k.recomputed_rows,
             steps > 0 ? rows / steps : 0.0);
  fmt::print(os,
             "  admission : up to {} requests running at once (limit {}); {} admissions, {} "
             "preemptions; {} positions taken from the prefix index\n",
             k.peak_running, limits_.max_running, k.admissions, k.preemptions, k.positions_reused);
  fmt::print(os,
             "  memory    : running requests' KV at most {:.3f} MB ({:.3f} MB of blocks held "
             "then), block size {}, {} blocks; finished requests' blocks kept in the prefix "
             "index: up to {:.3f} MB\n",
             result.peak.used / 1e6, result.peak.reserved / 1e6,
             cache_->blocks().pool().block_size(), pool_.num_blocks, peak_cached_ / 1e6);
  const long generated = result.generated_tokens();
  fmt::print(os,
             "  weights   : read once per pass for all its rows: {:.2f} passes per generated token "
             "(one request at a time: 1 or more)\n",
             generated > 0 ? static_cast<double>(result.passes) / generated : 0.0);
}

}  // namespace kvheap::ch05
