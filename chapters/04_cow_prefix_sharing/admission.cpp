#include "chapters/04_cow_prefix_sharing/admission.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "base/error.hpp"
#include "common/program/prompts.hpp"

namespace kvheap::ch04 {

long common_full_blocks(std::span<const int> a, std::span<const int> b, int block_size) {
  const std::size_t n = std::min(a.size(), b.size());
  std::size_t same = 0;
  while (same < n && a[same] == b[same]) ++same;
  return static_cast<long>(same / block_size);
}

RequestPlan plan_request(std::span<const int> prompt, const std::vector<std::vector<int>>& earlier,
                         int samples, int max_new_tokens, int block_size) {
  const long bs = block_size;
  const long full = static_cast<long>(prompt.size()) / bs;
  const long most = prompt.empty() ? 0 : static_cast<long>(prompt.size() - 1) / bs;
  RequestPlan plan;
  for (const auto& e : earlier)
    plan.reused_blocks = std::max(plan.reused_blocks, common_full_blocks(e, prompt, block_size));
  plan.reused_blocks = std::min(plan.reused_blocks, most);
  const long stored = positions_stored(prompt.size(), max_new_tokens);
  const long per_sample = (stored + bs - 1) / bs - full;
  plan.need = full - plan.reused_blocks + samples * per_sample;
  return plan;
}

KvOccupancy occupancy(const SharedBlockManager& blocks, std::size_t bytes_per_token) {
  const ch03::BlockPool& p = blocks.pool();
  const std::size_t block = static_cast<std::size_t>(p.block_size()) * bytes_per_token;
  return {static_cast<std::size_t>(blocks.blocks_held()) * block,
          static_cast<std::size_t>(blocks.index().num_evictable()) * block,
          static_cast<std::size_t>(p.num_free()) * block};
}

std::vector<Request> with_samples(const std::vector<Request>& requests, int samples) {
  if (samples <= 0 || samples > kMaxSeqs)
    throw UsageError(fmt::format("--samples must be from 1 to {}, got {}", kMaxSeqs, samples));
  if (static_cast<long>(requests.size()) * samples > kMaxSeqs)
    throw UsageError(fmt::format("{} prompts x {} samples is more than {} sequences",
                                 requests.size(), samples, kMaxSeqs));
  std::vector<Request> out;
  for (const Request& r : requests) {
    const int own = static_cast<int>(out.size());
    for (int k = 0; k < samples; ++k) {
      out.push_back(r);
      if (k > 0) out.back().fork_of = own;
    }
  }
  return out;
}

SharingAdmission::SharingAdmission(std::unique_ptr<SharedCache> cache, const ModelConfig& config,
                                   DType kv, PoolSize pool)
    : cache_(std::move(cache)), config_(config), kv_(kv), pool_(pool) {}

bool SharingAdmission::fits(int id, const Request& r, int forks, std::string& why) {
  const int samples = 1 + forks;
  const int bs = cache_->blocks().pool().block_size();
  const int num_blocks = cache_->blocks().pool().num_blocks();
  const RequestPlan plan = plan_request(r.prompt, admitted_prompts_, samples, r.max_new_tokens, bs);
  if (committed_ + plan.need > num_blocks) {
    why = fmt::format(
        "request {} not admitted: its {} samples need up to {} blocks beyond the {} they share, "
        "and the whole pool holds {}",
        id, samples, plan.need, plan.reused_blocks, num_blocks);
    return false;
  }
  prompt_of_[id] = prompts_seen_++;
  committed_ += plan.need;
  admitted_prompts_.push_back(r.prompt);
  return true;
}

int SharingAdmission::allocate(int id, const Request& r) {
  // Now, not at admission: the prompts before it have been prefilled, and the prefix index
  // holds their full blocks.
  const int seq = cache_->blocks().allocate(r.prompt);
  reused_[id] = cache_->blocks().length(seq);
  prompt_positions_ += static_cast<long>(r.prompt.size());
  return seq;
}

void SharingAdmission::release(const std::vector<int>& seqs, long) {
  // The snapshot the report shows: nothing of the batch was freed before, so this is its largest
  // state.
  if (cache_->blocks().blocks_referenced() > blocks_referenced_) {  // the largest batch's
    blocks_held_ = cache_->blocks().blocks_held();
    blocks_referenced_ = cache_->blocks().blocks_referenced();
  }
  for (const int s : seqs) cache_->blocks().free(s);
  committed_ = 0;
  // The next batch counts on sharing only with its own prompts: a finished batch's blocks stay
  // in the prefix index, but as cached blocks that may be evicted before they are found again.
  admitted_prompts_.clear();
}

KvOccupancy SharingAdmission::occupancy() {
  return ch04::occupancy(cache_->blocks(), kv_bytes_per_token(config_, kv_));
}

PolicyStats SharingAdmission::stats() const {
  const SharingCounters& k = cache_->blocks().counters();
  return {.budget_bytes = pool_.budget_bytes,
          .counters = {.positions_reused = k.tokens_reused},
          .sharing = SharingStats{.block_size = cache_->blocks().pool().block_size(),
                                  .blocks_total = pool_.num_blocks,
                                  .prompt_positions = prompt_positions_,
                                  .prompt_positions_reused = k.tokens_reused,
                                  .blocks_held = blocks_held_,
                                  .blocks_referenced = blocks_referenced_,
                                  .forks = k.forks,
                                  .copies_on_write = k.copies_on_write,
                                  .evictions = k.evictions,
                                  .read_once = cache_->reads_once(),
                                  .priced = cache_->prices_groups(),
                                  .groups_planned = cache_->groups_planned(),
                                  .groups_read_once = cache_->groups_read_once(),
                                  .pricing_seconds = cache_->pricing_seconds()}};
}

RequestStats SharingAdmission::request_stats(int id) const {
  const auto p = prompt_of_.find(id);
  const auto reused = reused_.find(id);
  return {.prompt = p == prompt_of_.end() ? id : p->second,
          .prompt_tokens_reused = reused == reused_.end() ? 0 : reused->second};
}

void SharingAdmission::check_drained() const {
  const SharedBlockManager& b = cache_->blocks();
  b.check_invariants();
  if (b.pool().num_used() != static_cast<int>(b.index().size()))
    throw std::logic_error("blocks leaked after every sequence finished");
}

}  // namespace kvheap::ch04
