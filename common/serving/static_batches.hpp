// Static batching: the serving policy of chapters 1 to 4.
//
// Requests are admitted in arrival order while they fit; the first that does not waits for the
// next batch, and so does everyone behind it. The batch's prompts are prefilled (all in one pass,
// or one per pass), then every request of the batch decodes one row per step until all of them
// have finished; only then, at the next step, does the batch give its memory back, and the next
// batch is admitted. A request that does not fit even an empty batch never will: it is turned
// away, with the chapter's reason. A chapter says what "fits" means (a reservation, a worst case in
// blocks) and where sequences live; StaticBatches does the rest.
//
//   step 0: [A0 A1 A2 | B0 B1 | C0]   prefill (one pass, or A, B, C in passes of their own)
//   step 1: [A3 | B2 | C1]            decode: one row per request
//   step 2: [A4 | C2]                 B finished: its row is gone, its memory stays until C ends
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/serving/serve.hpp"

namespace kvheap {

/// \brief What a chapter supplies to static batches: when a request fits, where its sequence
/// lives, and what the chapter counts.
class BatchAdmission {
 public:
  virtual ~BatchAdmission() = default;

  /// \brief The cache the batches run over.
  virtual KVCache& cache() = 0;
  /// \brief Whether request `id`, with `forks` requests forked from its prompt, can join the
  /// batch on top of those admitted to it so far (and takes its share if so). When it cannot,
  /// `why` says why, for the report of a refusal.
  virtual bool fits(int id, const Request& request, int forks, std::string& why) = 0;
  /// \brief A sequence for request `id`, taken when its prompt is about to be prefilled; it may
  /// already hold the first positions (a prefix found in an index), which are not computed again.
  virtual int allocate(int id, const Request& request) = 0;
  /// \brief Positions sequence `seq` holds (the prefill starts there).
  [[nodiscard]] virtual int length(int seq) const = 0;
  /// \brief A new sequence holding exactly what `seq` holds. Only admissions whose requests
  /// fork implement it; the default throws std::logic_error.
  virtual int fork(int seq);
  /// \brief The batch has finished, after `passes` forward passes of the run: every sequence it
  /// held, in request order, goes back.
  virtual void release(const std::vector<int>& seqs, long passes) = 0;
  /// \brief The pool by what holds it. By default the cache's bytes_reserved() are held and the
  /// rest of the budget is free.
  virtual KvOccupancy occupancy();
  /// \brief What the chapter counted; StaticBatches adds the requests' stats.
  [[nodiscard]] virtual PolicyStats stats() const = 0;
  /// \brief What the chapter says of request `id`, which has a prompt of its own; its forks say
  /// the same. Nothing by default.
  [[nodiscard]] virtual RequestStats request_stats(int id) const;
  /// \brief Throws std::logic_error unless every sequence came back.
  virtual void check_drained() const = 0;
};

/// \brief Serves requests in static batches, admitted by a chapter's BatchAdmission.
class StaticBatches final : public ServingPolicy {
 public:
  /// \brief How a batch is admitted and prefilled.
  struct Options {
    /// Prompts are prefilled one per pass, in order, so that each finds the blocks of the ones
    /// before it in a prefix index (chapter 4); else all in one pass.
    bool one_prompt_per_pass = false;
  };

  /// \brief A policy that admits through `admission` and prefills as `options` say.
  StaticBatches(std::unique_ptr<BatchAdmission> admission, Options options);
  /// \brief A policy that admits through `admission` and prefills all prompts in one pass.
  explicit StaticBatches(std::unique_ptr<BatchAdmission> admission);

  void submit(int id, const Request& request) override;
  StepPlan schedule() override;
  void append(int request, int token) override;
  void finish(int request) override;
  /// \brief True when nothing waits and the last batch has finished.
  [[nodiscard]] bool idle() const override;
  KVCache& cache() override { return admission_->cache(); }
  /// \brief The batch's requests, the cache's bytes_reserved() and bytes_used(), and the
  /// admission's occupancy().
  [[nodiscard]] PolicySnapshot snapshot() const override;
  /// \brief The admission's stats, with what it says of every request.
  [[nodiscard]] PolicyStats stats() const override;
  void check_drained() const override { admission_->check_drained(); }
  /// \brief The chapter's admission.
  [[nodiscard]] const BatchAdmission& admission() const { return *admission_; }

 private:
  struct Entry {
    const Request* request = nullptr;
    int seq = -1;  // sequence id in the chapter's cache; -1 until allocated or forked
    bool prefilled = false;
    int pending = -1;  // sampled token to feed next; -1 when none
    int next_pos = 0;  // position the next fed token takes
    bool done = false;
    std::vector<int> forks;  // requests forked from this one's prompt pass, in id order
  };
  Entry& entry(int id);
  [[nodiscard]] const Entry& entry(int id) const;
  void admit(StepPlan& plan);

  std::unique_ptr<BatchAdmission> admission_;
  Options options_;
  std::vector<Entry> entries_;  // indexed by request id
  std::vector<int> waiting_;    // request ids, arrival order (forks travel with their prompt)
  std::vector<int> batch_;      // the running batch, request order
  long passes_ = 0;             // forward passes planned so far
};

}  // namespace kvheap
