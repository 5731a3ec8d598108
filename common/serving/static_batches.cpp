#include "common/serving/static_batches.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <stdexcept>

namespace kvheap {

StaticBatches::Entry& StaticBatches::entry(int id) {
  if (id < 0 || id >= static_cast<int>(entries_.size()) || entries_[id].request == nullptr)
    throw std::logic_error(fmt::format("static batches: no request {}", id));
  return entries_[id];
}

const StaticBatches::Entry& StaticBatches::entry(int id) const {
  return const_cast<StaticBatches*>(this)->entry(id);
}

bool StaticBatches::idle() const {
  return waiting_.empty() &&
         std::all_of(batch_.begin(), batch_.end(), [&](int r) { return entry(r).done; });
}

int BatchAdmission::fork(int) {
  throw std::logic_error("static batches: this admission has no forks");
}

KvOccupancy BatchAdmission::occupancy() {
  return held_of_budget(cache().bytes_reserved(), stats().budget_bytes);
}

RequestStats BatchAdmission::request_stats(int) const { return {}; }

StaticBatches::StaticBatches(std::unique_ptr<BatchAdmission> admission, Options options)
    : admission_(std::move(admission)), options_(options) {}

StaticBatches::StaticBatches(std::unique_ptr<BatchAdmission> admission)
    : StaticBatches(std::move(admission), Options{}) {}

PolicySnapshot StaticBatches::snapshot() const {
  KVCache& c = admission_->cache();
  return {static_cast<int>(batch_.size()),
          {c.bytes_reserved(), c.bytes_used()},
          admission_->occupancy()};
}

PolicyStats StaticBatches::stats() const {
  PolicyStats s = admission_->stats();
  s.requests.resize(entries_.size());
  for (std::size_t id = 0; id < entries_.size(); ++id) {
    const Request* r = entries_[id].request;
    if (r == nullptr) continue;  // max_new_tokens 0: finished on arrival, never submitted
    s.requests[id] = admission_->request_stats(r->fork_of >= 0 ? r->fork_of : static_cast<int>(id));
  }
  return s;
}

void StaticBatches::submit(int id, const Request& request) {
  if (id < static_cast<int>(entries_.size()) && entries_[id].request != nullptr)
    throw std::logic_error(fmt::format("static batches: request {} submitted twice", id));
  if (id >= static_cast<int>(entries_.size())) entries_.resize(id + 1);
  Entry& e = entries_[id];
  e.request = &request;
  e.next_pos = static_cast<int>(request.prompt.size());
  if (request.fork_of < 0) {
    waiting_.push_back(id);
  } else {
    entry(request.fork_of).forks.push_back(id);  // a fork joins with its prompt's request
  }
}

void StaticBatches::admit(StepPlan& plan) {
  std::vector<int> still_waiting;
  for (std::size_t w = 0; w < waiting_.size(); ++w) {
    const int id = waiting_[w];
    const std::vector<int> forks = entry(id).forks;
    std::string why;
    if (admission_->fits(id, *entry(id).request, static_cast<int>(forks.size()), why)) {
      batch_.push_back(id);
      batch_.insert(batch_.end(), forks.begin(), forks.end());
      plan.admitted.push_back(id);
      plan.admitted.insert(plan.admitted.end(), forks.begin(), forks.end());
      continue;
    }
    if (!batch_.empty()) {  // first come, first served: everyone behind waits too
      still_waiting.assign(waiting_.begin() + static_cast<long>(w), waiting_.end());
      break;
    }
    // Not even an empty batch holds it: it never fits, so it is turned away with its forks.
    plan.refused.emplace_back(id, why);
    for (const int f : forks) plan.refused.emplace_back(f, "");
    for (const int r : forks) entries_[r].done = true;
    entry(id).done = true;
  }
  waiting_ = std::move(still_waiting);
  std::sort(batch_.begin(), batch_.end());
}

StepPlan StaticBatches::schedule() {
  StepPlan plan;
  // A finished batch gives its memory back here, at the start of the next step, so that what
  // runs after its last step (a report's snapshot) still sees it.
  if (!batch_.empty() &&
      std::all_of(batch_.begin(), batch_.end(), [&](int r) { return entry(r).done; })) {
    std::vector<int> seqs;
    for (const int r : batch_) seqs.push_back(entry(r).seq);
    batch_.clear();
    admission_->release(seqs, passes_);
  }
  if (batch_.empty()) admit(plan);
  // Prompts first: the batch's requests that have not had their prompt pass.
  for (const int id : batch_) {
    Entry& e = entry(id);
    if (e.prefilled || e.request->fork_of >= 0) continue;
    e.seq = admission_->allocate(id, *e.request);
    e.prefilled = true;
    const std::vector<int>& prompt = e.request->prompt;
    const int n = static_cast<int>(prompt.size());
    const int held = admission_->length(e.seq);
    for (int t = held; t < n; ++t) plan.batch.rows.push_back({prompt[t], e.seq, t, t + 1 == n});
    plan.prefill_rows += n - held;
    plan.logit_requests.push_back(id);
    if (options_.one_prompt_per_pass) break;
  }
  if (!plan.batch.rows.empty()) {
    ++passes_;
    return plan;
  }
  // Then one row per request with a sampled token to feed.
  for (const int id : batch_) {
    Entry& e = entry(id);
    if (e.pending < 0) continue;
    plan.batch.rows.push_back({e.pending, e.seq, e.next_pos++, true});
    plan.logit_requests.push_back(id);
    ++plan.decode_rows;
    e.pending = -1;
  }
  if (!plan.batch.rows.empty()) ++passes_;
  return plan;
}

void StaticBatches::append(int id, int token) {
  Entry& e = entry(id);
  if (e.done || e.pending >= 0)
    throw std::logic_error(fmt::format(
        "static batches: append to request {}, which has no logit row waiting for a token", id));
  if (e.seq < 0) e.seq = admission_->fork(entry(e.request->fork_of).seq);
  e.pending = token;
}

void StaticBatches::finish(int id) {
  Entry& e = entry(id);
  if (e.done) throw std::logic_error(fmt::format("static batches: request {} finished twice", id));
  // Its prompt's pass is its memory.
  if (e.seq < 0) e.seq = admission_->fork(entry(e.request->fork_of).seq);
  e.done = true;
  e.pending = -1;
}

}  // namespace kvheap
