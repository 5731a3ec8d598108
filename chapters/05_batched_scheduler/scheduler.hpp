// Continuous batching over chapter 4's shared blocks: which rows run in the next forward pass.
//
// Each step the scheduler fills one batch under a token budget, oldest requests first:
//
//   1. decode rows: one row for each running request that has a sampled token to feed
//   2. prefill chunks: the next prompt positions of running requests still prefilling
//   3. admissions: waiting requests, in arrival order, while their first chunk fits (and no
//      running request is computing the next block of their prompt: they wait for the index)
//
//   step 7, budget 8:  [A:41] [B:17] [C:9] | [D:12 13 14 15] | [E:0 1]   (E admitted, 2 of its
//                       decode rows          prefill chunk      prompt's 5 positions)
//
// A request is admitted when the blocks its next chunk needs are available, not its worst case:
// the pool fills with live sequences instead of reservations. The price is that a decode step may
// find no block for a request's next position. Then the newest running request is preempted: its
// sequence is freed and it waits again at the head of the queue. Its full blocks stay in the
// prefix index, so when it is admitted again it takes them back and recomputes only the rest
// (preemption by recomputation, made cheap by chapter 4's cache).
//
// Every request's tokens (prompt, then what it generated) are rows to compute, `computed` of them
// already in its sequence; the one row whose logits are wanted is the last. A running request
// with one row left decodes; with more, it prefills. That one rule covers a fresh prompt, a
// chunked one, and a preempted request coming back.
#pragma once

#include <span>
#include <vector>

#include "chapters/04_cow_prefix_sharing/shared_block_manager.hpp"
#include "common/cache/batch.hpp"
#include "common/serving/serve.hpp"

namespace kvheap::ch05 {

/// \brief Limits of one step.
struct SchedulerConfig {
  int max_batch_tokens = 256;  ///< rows per forward pass, decode rows and prefill chunks together
  int max_running = 256;       ///< requests holding a sequence at once
};

/// \brief Where a request is.
enum class RequestState {
  Waiting,   ///< queued, or preempted and queued again; holds no blocks
  Running,   ///< holds a sequence in the pool
  Finished,  ///< done; its blocks went back (full ones stay cached)
};

/// \brief Requests in, batches out: admission by free blocks, chunked prefill, preemption.
class Scheduler {
 public:
  /// \brief Schedules over `blocks`, whose sequences it then owns (the cache's prepare() grows
  /// them when the planned batch runs). Throws UsageError for a limit below 1.
  Scheduler(ch04::SharedBlockManager& blocks, SchedulerConfig config);

  /// \brief Queues a request and returns its id (0, 1, 2, ... in arrival order). Throws
  /// InputError for an empty prompt, or when the request could not fit in the whole pool even
  /// alone: its prompt plus `max_new_tokens` - 1 generated positions.
  int submit(std::span<const int> prompt, int max_new_tokens);

  /// \brief Plans the next step. Each running request must have been given its sampled token
  /// (append) or finished since its last logit row. Returns an empty batch only when nothing is
  /// waiting or running.
  StepPlan schedule();
  /// \brief The token sampled from `request`'s logit row: the next step feeds it.
  void append(int request, int token);
  /// \brief `request` is done: its sequence is freed (full blocks stay cached).
  void finish(int request);

  /// \brief True when every request has finished.
  [[nodiscard]] bool idle() const { return waiting_.empty() && running_.empty(); }
  /// \brief Prompt then generated tokens of `request`.
  [[nodiscard]] const std::vector<int>& tokens(int request) const;
  /// \brief Where `request` is.
  [[nodiscard]] RequestState state(int request) const;
  /// \brief Times `request` was preempted.
  [[nodiscard]] int preemptions(int request) const;
  /// \brief Requests submitted.
  [[nodiscard]] int num_requests() const { return static_cast<int>(reqs_.size()); }
  /// \brief Requests running now.
  [[nodiscard]] int num_running() const { return static_cast<int>(running_.size()); }
  /// \brief What it has done so far.
  [[nodiscard]] const SchedulerCounters& counters() const { return counters_; }

 private:
  struct Entry {              // a submitted request, as the queue tracks it
    std::vector<int> tokens;  // prompt, then generated
    int prompt_len = 0;
    int max_new_tokens = 0;
    int seq = -1;        // SharedBlockManager id while running
    int computed = 0;    // tokens already in the sequence
    int high_water = 0;  // most tokens it ever had computed (recomputation after that)
    int preemptions = 0;
    RequestState state = RequestState::Waiting;
  };
  struct Chunk {
    int request = 0;
    int rows = 0;
    long blocks = 0;  // new blocks its rows take
  };
  // What one schedule() has planned so far.
  struct Planning {
    std::vector<Chunk> chunks;
    std::vector<int> admitted;
    std::vector<int> preempted;  // in this step: they wait for the next one
    long reserved = 0;           // blocks the planned rows take when the batch runs
    int budget = 0;              // rows the batch has left
  };
  // The steps of schedule(), in their order.
  void check_every_request_was_fed() const;
  void plan_running(Planning& p, bool decode);
  void admit_waiting(Planning& p);
  StepPlan batch_of(const Planning& p);

  [[nodiscard]] bool fits(const Planning& p, long need) const {
    return p.reserved + need <= blocks_.num_available();
  }
  Entry& req(int id, const char* what);
  [[nodiscard]] const Entry& req(int id, const char* what) const;
  [[nodiscard]] bool computing_next_block(const Entry& r, long cached) const;
  void preempt(int id, Planning& p);
  void enqueue(int id);

  ch04::SharedBlockManager& blocks_;
  SchedulerConfig cfg_;
  std::vector<Entry> reqs_;
  std::vector<int> waiting_;  // request ids, arrival order
  std::vector<int> running_;  // request ids, arrival order
  SchedulerCounters counters_;
};

}  // namespace kvheap::ch05
