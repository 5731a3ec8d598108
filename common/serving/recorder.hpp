// What the serving loop records beside its step, so that the step reads as the idea: the clock
// and the arrivals, each request's sampler and the requests forked from its prompt, the tokens
// taken, the phase times, the timeline of KV memory, and the progress lines.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/forward/backend.hpp"
#include "common/model/model_config.hpp"
#include "common/serving/sampler.hpp"
#include "common/serving/serve.hpp"

namespace kvheap {

/// \brief The serving loop's records of one run (serve() owns one).
class Recorder {
 public:
  /// \brief Starts the clock for `requests`; makes each request's sampler (UsageError for a bad
  /// temperature or top-p) and lists the requests forked from each one's prompt.
  Recorder(const std::vector<Request>& requests, const ModelConfig& config,
           const ServeHooks& hooks);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  /// \brief True when request `i` has arrived by `step`: by its wall-clock time when it has one.
  [[nodiscard]] bool arrived(std::size_t i, long step) const;
  /// \brief Nothing can run until request `i` arrives: skips `step` ahead to its step, or sleeps
  /// until its time, saying so when the wait is long.
  void wait_for(std::size_t i, long& step);
  /// \brief Records request `i`'s arrival at `step`. False when it needs nothing run (no new
  /// tokens: it is done at once), true when the policy should take it.
  bool arrive(std::size_t i, long step);

  /// \brief A step begins: the scheduling phase starts now.
  void start_step();
  /// \brief The policy's plan: the requests it turned away and the ones it admitted.
  void scheduled(const StepPlan& plan);
  /// \brief One sampling job per token the pass chooses: each logit row's request's, and on a
  /// prompt pass the forked requests' (their first token comes from the same row, drawn with
  /// their own seed). The forward phase starts now.
  const std::vector<SamplingJob>& jobs_for(const StepPlan& plan);
  /// \brief After the pass: its phase times, the policy's KV memory and the positions read.
  void passed(const StepPlan& plan, ServingPolicy& policy, const Backend& backend);

  /// \brief A token taken: whose, which, and why the request ends ("" when it goes on).
  struct Taken {
    int request = 0;   ///< the job's request
    int token = 0;     ///< the token chosen
    std::string done;  ///< take_token()'s status: "", "stop token" or "max_new_tokens"
  };
  /// \brief Job `k`'s token, recorded for its request at `step`. Throws InputError for a
  /// logit row that held a NaN.
  Taken take(std::size_t k, const SampledToken& pick, long step);
  /// \brief The step's pass is done: totals, phases, a timeline sample, hooks and progress.
  void end_step(const StepPlan& plan, long step);

  /// \brief The run after its last step: the policy's counters, and its check that every block
  /// or reservation came back.
  ServeResult finish(ServingPolicy& policy, long steps);

 private:
  using Clock = std::chrono::steady_clock;
  class Progress;
  [[nodiscard]] double now() const;

  const std::vector<Request>& requests_;
  const ModelConfig& config_;
  const ServeHooks& hooks_;
  ServeResult res_;
  std::vector<Sampler> samplers_;
  std::vector<std::vector<int>> forks_;  // requests forked from each request's prompt pass
  std::vector<char> started_;            // a token was sampled for it
  std::vector<SamplingJob> jobs_;        // this pass's
  std::vector<int> job_request_;         // whose token each job chooses
  Clock::time_point t0_, pass_start_, forward_start_, record_start_;
  double sampled_at_ = 0;  // seconds since t0_ when this pass's tokens were taken
  bool sampled_usage_ = false;
  PolicySnapshot snapshot_;
  PassTimes times_;
  std::unique_ptr<Progress> progress_;
};

}  // namespace kvheap
