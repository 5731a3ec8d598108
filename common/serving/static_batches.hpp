// Static batching: the serving policy of chapters 1 to 4.
//
// Requests are admitted in arrival order while they fit; the first that does not waits for the
// next batch, and so does everyone behind it. The batch's prompts are prefilled (all in one pass,
// or one per pass), then every request of the batch decodes one row per step until all of them
// have finished; only then, at the next step, does the batch give its memory back, and the next
// batch is admitted. A request that does not fit even an empty batch never will: it is turned
// away, with the chapter's reason. A chapter says what "fits" means (a reservation, a worst case in
// blocks) and where sequences live; this class does the rest.
//
//   step 0: [A0 A1 A2 | B0 B1 | C0]   prefill (one pass, or A, B, C in passes of their own)
//   step 1: [A3 | B2 | C1]            decode: one row per request
//   step 2: [A4 | C2]                 B finished: its row is gone, its memory stays until C ends
#pragma once

#include <string>
#include <vector>

#include "common/serving/serve.hpp"

namespace kvheap {

/// \brief Serves requests in static batches; a chapter supplies admission and sequences.
class StaticBatches : public ServingPolicy {
 public:
  /// \brief How a batch is admitted and prefilled.
  struct Options {
    /// Prompts are prefilled one per pass, in order, so that each finds the blocks of the ones
    /// before it in a prefix index (chapter 4); else all in one pass.
    bool one_prompt_per_pass = false;
  };

  void submit(int id, const Request& request) override;
  StepPlan schedule() override;
  void append(int request, int token) override;
  void finish(int request) override;
  /// \brief True when nothing waits and the last batch has finished.
  [[nodiscard]] bool idle() const override;
  [[nodiscard]] int running() const override { return static_cast<int>(batch_.size()); }

 protected:
  /// \brief A policy that admits and prefills as `options` say.
  explicit StaticBatches(Options options) : options_(options) {}

  /// \brief Whether request `id`, with `forks` requests forked from its prompt, can join the
  /// batch on top of those admitted to it so far (and takes its share if so). When it cannot,
  /// `why` says why, for the report of a refusal.
  virtual bool fits(int id, const Request& request, int forks, std::string& why) = 0;
  /// \brief A sequence for request `id`, taken when its prompt is about to be prefilled; it may
  /// already hold the first positions (a prefix found in an index), which are not computed again.
  virtual int allocate(int id, const Request& request) = 0;
  /// \brief Positions sequence `seq` holds (the prefill starts there).
  [[nodiscard]] virtual int length(int seq) const = 0;
  /// \brief A new sequence holding exactly what `seq` holds. Only policies whose requests fork
  /// implement it; the default throws std::logic_error.
  virtual int fork(int seq);
  /// \brief The batch has finished: every sequence it held, in request order, goes back.
  virtual void release(const std::vector<int>& seqs) = 0;

  /// \brief Whether request `id` was submitted: one with max_new_tokens 0 never is, as serve()
  /// finishes it on arrival.
  [[nodiscard]] bool submitted(int id) const {
    return id >= 0 && id < static_cast<int>(entries_.size()) && entries_[id].request != nullptr;
  }
  /// \brief The request behind id `id`.
  [[nodiscard]] const Request& request(int id) const { return *entry(id).request; }
  /// \brief The sequence of request `id` (-1 before its prompt pass).
  [[nodiscard]] int sequence(int id) const { return entry(id).seq; }

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

  Options options_;
  std::vector<Entry> entries_;  // indexed by request id
  std::vector<int> waiting_;    // request ids, arrival order (forks travel with their prompt)
  std::vector<int> batch_;      // the running batch, request order
};

}  // namespace kvheap
