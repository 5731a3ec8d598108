#include "chapters/05_batched_scheduler/scheduler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "base/error.hpp"

namespace kvheap::ch05 {

Scheduler::Scheduler(ch04::SharedBlockManager& blocks, SchedulerConfig config)
    : blocks_(blocks), cfg_(config) {
  if (cfg_.max_batch_tokens < 1)
    throw UsageError(
        fmt::format("--max-batch-tokens must be at least 1, got {}", cfg_.max_batch_tokens));
  if (cfg_.max_running < 1)
    throw UsageError(fmt::format("--max-running must be at least 1, got {}", cfg_.max_running));
}

int Scheduler::submit(std::span<const int> prompt, int max_new_tokens) {
  const int id = static_cast<int>(reqs_.size());
  if (prompt.empty()) throw InputError(fmt::format("request {}: the prompt is empty", id));
  if (max_new_tokens < 1)
    throw InputError(
        fmt::format("request {}: max_new_tokens must be at least 1, got {}", id, max_new_tokens));
  // Alone in the pool it must fit: that is what makes preemption always end.
  const long positions = static_cast<long>(prompt.size()) + max_new_tokens - 1;
  const long need = blocks_.blocks_for(positions);
  if (need > blocks_.pool().num_blocks())
    throw InputError(fmt::format(
        "request {}: {} prompt tokens plus {} generated need {} blocks of {} positions, and the "
        "whole pool holds {}; give a larger KV budget or fewer new tokens",
        id, prompt.size(), max_new_tokens - 1, need, blocks_.pool().block_size(),
        blocks_.pool().num_blocks()));
  Entry r;
  r.tokens.assign(prompt.begin(), prompt.end());
  r.prompt_len = static_cast<int>(prompt.size());
  r.max_new_tokens = max_new_tokens;
  reqs_.push_back(std::move(r));
  waiting_.push_back(id);
  return id;
}

bool Scheduler::computing_next_block(const Entry& r, long cached) const {
  // The block after r's cached ones, if r's prompt can take it from the index at all (never the
  // block of its last token), and a running request that holds the same tokens up to its end but
  // has not computed it yet. Its K and V are the same, so r would compute a copy.
  const long bs = blocks_.pool().block_size();
  const long end = (cached + 1) * bs;
  if (end > static_cast<long>(r.tokens.size()) - 1) return false;
  for (const int id : running_) {
    const Entry& q = reqs_[id];
    if (q.computed < end && static_cast<long>(q.tokens.size()) >= end &&
        std::equal(r.tokens.begin(), r.tokens.begin() + end, q.tokens.begin()))
      return true;
  }
  return false;
}

void Scheduler::enqueue(int id) {
  waiting_.insert(std::lower_bound(waiting_.begin(), waiting_.end(), id), id);
}

void Scheduler::preempt(int id, Planning& p) {
  Entry& r = reqs_[id];
  const auto chunk = std::find_if(p.chunks.begin(), p.chunks.end(),
                                  [&](const Chunk& c) { return c.request == id; });
  if (chunk != p.chunks.end()) {
    p.reserved -= chunk->blocks;
    p.budget += chunk->rows;
    p.chunks.erase(chunk);
  }
  blocks_.free(r.seq);
  r.seq = -1;
  r.computed = 0;
  r.state = RequestState::Waiting;
  ++r.preemptions;
  ++counters_.preemptions;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  enqueue(id);
  p.preempted.push_back(id);
}

StepPlan Scheduler::schedule() {
  check_every_request_was_fed();
  Planning p;
  p.budget = cfg_.max_batch_tokens;
  plan_running(p, /*decode=*/true);   // 1. decode rows
  plan_running(p, /*decode=*/false);  // 2. prefill chunks
  admit_waiting(p);                   // 3. admissions
  return batch_of(p);                 // the rows of what was planned
}

void Scheduler::check_every_request_was_fed() const {
  for (int id : running_) {
    const Entry& r = reqs_[id];
    if (blocks_.length(r.seq) != r.computed)
      throw std::logic_error(fmt::format(
          "scheduler: request {} holds {} positions where {} were planned: run every planned "
          "batch through the cache before planning the next",
          id, blocks_.length(r.seq), r.computed));
    if (r.computed == static_cast<int>(r.tokens.size()))
      throw std::logic_error(fmt::format(
          "scheduler: request {} has no token to feed: append its sampled token or finish it", id));
  }
}

// Running requests, oldest first, with one row left (decode) or more (prefill). When the pool
// cannot grow one, the newest running request gives its blocks back (possibly this one).
void Scheduler::plan_running(Planning& p, bool decode) {
  const std::vector<int> order = running_;
  for (const int id : order) {
    Entry& r = reqs_[id];
    if (p.budget == 0) break;
    if (r.state != RequestState::Running) continue;  // preempted during this step
    const int left = static_cast<int>(r.tokens.size()) - r.computed;
    if ((left == 1) != decode) continue;
    int rows = std::min(left, p.budget);
    long need = blocks_.blocks_to_grow(r.seq, rows);
    if (!decode && !fits(p, need)) {
      // A prompt chunk shrinks to the slots there are before anyone is preempted for it.
      const long bs = blocks_.pool().block_size();
      const long room = static_cast<long>(blocks_.page_table(r.seq).size()) * bs - r.computed +
                        (blocks_.num_available() - p.reserved) * bs;
      if (room >= 1) {
        rows = static_cast<int>(std::min<long>(rows, room));
        need = blocks_.blocks_to_grow(r.seq, rows);
      }
    }
    while (!fits(p, need) && r.state == RequestState::Running) {
      preempt(running_.back(), p);
      if (r.state == RequestState::Running) need = blocks_.blocks_to_grow(r.seq, rows);
    }
    if (r.state != RequestState::Running) continue;
    p.chunks.push_back({id, rows, need});
    p.reserved += need;
    p.budget -= rows;
  }
}

// Admissions, in arrival order, while the next request's first chunk fits. A request preempted
// in this step waits for the next, and so does everyone behind it (first come, first served);
// so does a request whose next prompt block a running request is computing right now.
void Scheduler::admit_waiting(Planning& p) {
  while (p.budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < cfg_.max_running) {
    const int id = waiting_.front();
    if (std::find(p.preempted.begin(), p.preempted.end(), id) != p.preempted.end()) break;
    Entry& r = reqs_[id];
    const long cached = blocks_.cached_blocks(r.tokens);
    if (computing_next_block(r, cached)) break;  // it will be cached: wait for it, not compute it
    const long retaken = blocks_.cached_evictable_blocks(r.tokens);
    const int start = static_cast<int>(cached * blocks_.pool().block_size());
    const int rows = std::min(static_cast<int>(r.tokens.size()) - start, p.budget);
    const long fresh = blocks_.blocks_for(start + rows) - cached;
    if (!fits(p, fresh + retaken)) break;
    r.seq = blocks_.allocate(r.tokens);  // takes the cached blocks: available drops by `retaken`
    r.computed = start;
    r.state = RequestState::Running;
    running_.insert(std::lower_bound(running_.begin(), running_.end(), id), id);
    waiting_.erase(waiting_.begin());
    ++counters_.admissions;
    counters_.positions_reused += start;
    p.admitted.push_back(id);
    p.chunks.push_back({id, rows, fresh});
    p.reserved += fresh;
    p.budget -= rows;
  }
}

// The rows, in plan order: each request's positions in increasing order, logits on its last.
StepPlan Scheduler::batch_of(const Planning& p) {
  StepPlan step;
  step.admitted = p.admitted;
  for (const Chunk& c : p.chunks) {
    Entry& r = reqs_[c.request];
    const bool decode = static_cast<int>(r.tokens.size()) - r.computed == 1;
    for (int i = 0; i < c.rows; ++i) {
      const int pos = r.computed + i;
      const bool last = pos + 1 == static_cast<int>(r.tokens.size());
      step.batch.rows.push_back({r.tokens[pos], r.seq, pos, last});
      if (last) step.logit_requests.push_back(c.request);
      if (pos < r.high_water) ++counters_.recomputed_rows;
    }
    (decode ? step.decode_rows : step.prefill_rows) += c.rows;
    r.computed += c.rows;
    r.high_water = std::max(r.high_water, r.computed);
  }
  if (step.batch.rows.empty() && !idle())
    throw std::logic_error(
        fmt::format("scheduler: nothing fits although {} requests wait and {} run", waiting_.size(),
                    running_.size()));
  counters_.decode_rows += step.decode_rows;
  counters_.prefill_rows += step.prefill_rows;
  counters_.peak_running = std::max(counters_.peak_running, static_cast<int>(running_.size()));
  if (!step.batch.rows.empty()) ++counters_.steps;
  return step;
}

void Scheduler::append(int request, int token) {
  Entry& r = req(request, "append");
  if (r.state != RequestState::Running || r.computed != static_cast<int>(r.tokens.size()))
    throw std::logic_error(fmt::format(
        "scheduler: append to request {}, which has no logit row waiting for a token", request));
  if (static_cast<int>(r.tokens.size()) - r.prompt_len >= r.max_new_tokens - 1)
    throw std::logic_error(
        fmt::format("scheduler: request {} has generated its {} tokens already; finish it", request,
                    r.max_new_tokens));
  r.tokens.push_back(token);
}

void Scheduler::finish(int request) {
  Entry& r = req(request, "finish");
  if (r.state != RequestState::Running)
    throw std::logic_error(
        fmt::format("scheduler: finish request {}, which is not running", request));
  blocks_.free(r.seq);
  r.seq = -1;
  r.state = RequestState::Finished;
  running_.erase(std::find(running_.begin(), running_.end(), request));
}

const std::vector<int>& Scheduler::tokens(int request) const {
  return req(request, "tokens").tokens;
}

RequestState Scheduler::state(int request) const { return req(request, "state").state; }

int Scheduler::preemptions(int request) const { return req(request, "preemptions").preemptions; }

Scheduler::Entry& Scheduler::req(int id, const char* what) {
  if (id < 0 || id >= static_cast<int>(reqs_.size()))
    throw InputError(fmt::format("{}: no request {} (there are {})", what, id, reqs_.size()));
  return reqs_[id];
}

const Scheduler::Entry& Scheduler::req(int id, const char* what) const {
  if (id < 0 || id >= static_cast<int>(reqs_.size()))
    throw InputError(fmt::format("{}: no request {} (there are {})", what, id, reqs_.size()));
  return reqs_[id];
}

}  // namespace kvheap::ch05
