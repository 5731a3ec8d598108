#include "chapters/04_cow_prefix_sharing/admission.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fmt/ostream.h>

#include <algorithm>
#include <ostream>
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
    : StaticBatches({.one_prompt_per_pass = true}),
      cache_(std::move(cache)),
      config_(config),
      kv_(kv),
      pool_(pool) {}

int SharingAdmission::root(int request) const {
  const int parent = this->request(request).fork_of;
  return parent >= 0 ? parent : request;
}

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

StepPlan SharingAdmission::schedule() {
  StepPlan plan = StaticBatches::schedule();
  if (plan.decode_rows > 0) {
    ++decode_steps_;
    for (const BatchRow& row : plan.batch.rows) unshared_positions_ += row.pos + 1;
  }
  return plan;
}

void SharingAdmission::release(const std::vector<int>& seqs) {
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

PolicyCounters SharingAdmission::counters() const {
  return {.positions_reused = cache_->blocks().counters().tokens_reused};
}

void SharingAdmission::check_drained() const {
  const SharedBlockManager& b = cache_->blocks();
  b.check_invariants();
  if (b.pool().num_used() != static_cast<int>(b.index().size()))
    throw std::logic_error("blocks leaked after every sequence finished");
}

double SharingAdmission::unshared_bytes_per_step() const {
  return decode_steps_ > 0
             ? unshared_positions_ * static_cast<double>(kv_bytes_per_token(config_, kv_)) /
                   static_cast<double>(decode_steps_)
             : 0.0;
}

std::pair<int, int> SharingAdmission::prompt_and_reused(int request) const {
  const int r = root(request);
  const auto p = prompt_of_.find(r);
  const auto reused = reused_.find(r);
  return {p == prompt_of_.end() ? r : p->second, reused == reused_.end() ? 0 : reused->second};
}

void SharingAdmission::add_request_json(int request, nlohmann::json& entry) const {
  if (!submitted(request)) return;  // max_new_tokens 0: finished on arrival, never admitted
  const auto [prompt, reused] = prompt_and_reused(request);
  entry["request"] = prompt;
  entry["prompt_tokens_reused"] = reused;
}

std::string SharingAdmission::describe_request(int request) const {
  if (!submitted(request)) return "";  // max_new_tokens 0: finished on arrival, never admitted
  const auto [prompt, reused] = prompt_and_reused(request);
  return fmt::format(" (prompt {}, {} prompt tokens from the cache)", prompt, reused);
}

void SharingAdmission::add_json(nlohmann::json& root, const ServeResult&) const {
  const SharingCounters& k = cache_->blocks().counters();
  root["sharing"] = {{"block_size", cache_->blocks().pool().block_size()},
                     {"blocks_total", pool_.num_blocks},
                     {"prompt_positions", prompt_positions_},
                     {"prompt_positions_reused", k.tokens_reused},
                     {"blocks_held", blocks_held_},
                     {"blocks_referenced", blocks_referenced_},
                     {"forks", k.forks},
                     {"copies_on_write", k.copies_on_write},
                     {"evictions", k.evictions},
                     {"read_once", cache_->reads_once()},
                     {"kv_bytes_per_step_unshared", unshared_bytes_per_step()}};
}

void SharingAdmission::print(std::ostream& os, const ServeResult& result) const {
  const SharingCounters& k = cache_->blocks().counters();
  fmt::print(os,
             "  computed once: {} of {} prompt positions computed, {} taken from the prefix "
             "index, in {} prefill passes\n",
             prompt_positions_ - k.tokens_reused, prompt_positions_, k.tokens_reused,
             result.prefill_passes);
  fmt::print(os,
             "  stored once  : {} blocks of {} held where unshared page tables would hold {} "
             "({:.1f} %); {} forks, {} copies on write, {} evictions\n",
             blocks_held_, cache_->blocks().pool().block_size(), blocks_referenced_,
             blocks_referenced_ > 0 ? 100.0 * blocks_held_ / blocks_referenced_ : 0.0, k.forks,
             k.copies_on_write, k.evictions);
  fmt::print(
      os,
      "  read once    : KV read per decode step {:.3f} MB where every row reading its "
      "whole context reads {:.3f} MB{}\n",
      result.decode_passes() > 0
          ? result.decode_positions_read * static_cast<double>(kv_bytes_per_token(config_, kv_)) /
                static_cast<double>(result.decode_passes()) / 1e6
          : 0.0,
      unshared_bytes_per_step() / 1e6, cache_->reads_once() ? "" : " (--no-read-once: the same)");
}

}  // namespace kvheap::ch04
