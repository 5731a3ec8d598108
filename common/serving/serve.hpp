// The serving loop every chapter program runs, and the interface a chapter's policy implements.
//
//   requests (prompt, max new tokens, arrival, sampler)  ->  policy.schedule()  ->  batch of rows
//      ^                                                                               |
//      |   finish / append   <-   sample   <-   backend.forward(batch, policy.cache())  <-+
//
// A chapter supplies only its policy: which requests it admits and when, and the cache they run
// over. The loop submits requests as they arrive, runs each planned batch through the forward
// pass, samples every logit row with its request's sampler, and tells the policy what came out.
#pragma once

#include <cstddef>
#include <functional>
#include <iosfwd>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/forward/backend.hpp"
#include "common/cache/batch.hpp"
#include "common/cache/kv_cache.hpp"
#include "common/model/model_config.hpp"
#include "common/serving/policy_stats.hpp"
#include "common/serving/sampler.hpp"

namespace kvheap {

/// \brief One request to serve.
struct Request {
  std::vector<int> prompt;  ///< token ids; never empty
  int max_new_tokens = 0;   ///< at most this many tokens are generated (0: done at once)
  long arrival_step = 0;    ///< the loop submits it before this step, or when idle before
  /// \brief Seconds after the loop starts at which it arrives, against the wall clock; the loop
  /// waits for it when idle, and its latencies count from then. Negative: arrival_step counts.
  double arrival_seconds = -1;
  std::vector<int> stop_ids;  ///< tokens that end it besides the model's stop ids (never ignored)
  SamplerConfig sampling;     ///< greedy, temperature, top-p, seed: the request's own sampler
  bool ignore_eos = false;    ///< generate exactly max_new_tokens
  /// \brief Another request, before this one, whose prompt this one shares as a fork (chapter
  /// 4's samples): its first token is sampled from that request's prompt pass, and its sequence
  /// forks that request's. -1: a prompt of its own.
  int fork_of = -1;
};

/// \brief One forward pass to run, and whose logits come back.
struct StepPlan {
  Batch batch;                      ///< rows: seq = the sequence id in the policy's cache
  std::vector<int> logit_requests;  ///< request id of each logit row, in row order
  int decode_rows = 0;              ///< rows of requests decoding (feeding a sampled token)
  int prefill_rows = 0;             ///< rows of prompts (or of a preempted request computed again)
  std::vector<int> admitted;        ///< requests that took memory in this step (again: preempted)
  /// \brief Requests turned away in this step, and why (they are never served); a request
  /// turned away with another (a fork with its prompt) has no reason of its own.
  std::vector<std::pair<int, std::string>> refused;
};

/// \brief What a chapter's policy does for the loop: admission, scheduling and the cache. It
/// counts what it did (snapshot(), stats()); the report prints it (policy_report.hpp).
class ServingPolicy {
 public:
  virtual ~ServingPolicy() = default;

  /// \brief A request arrives; ids are 0, 1, 2, ... in arrival order. Throws InputError for one
  /// the policy could never serve.
  virtual void submit(int id, const Request& request) = 0;
  /// \brief Plans the next step: rows to run, and requests turned away. An empty batch means
  /// nothing can run until another request arrives.
  virtual StepPlan schedule() = 0;
  /// \brief The token sampled from `request`'s logit row: the next step feeds it.
  virtual void append(int request, int token) = 0;
  /// \brief `request` is done (a stop token, or its last token).
  virtual void finish(int request) = 0;
  /// \brief True when nothing is waiting or running.
  [[nodiscard]] virtual bool idle() const = 0;
  /// \brief The cache the planned batches run over.
  virtual KVCache& cache() = 0;
  /// \brief Requests running and the KV memory they hold; the loop asks after every forward
  /// pass, before the pass's tokens are taken.
  [[nodiscard]] virtual PolicySnapshot snapshot() const = 0;
  /// \brief What the policy did, for the report: asked once the run is over.
  [[nodiscard]] virtual PolicyStats stats() const = 0;
  /// \brief Called once every request has finished: throws std::logic_error unless every block
  /// or reservation came back.
  virtual void check_drained() const = 0;
};

/// \brief Where a step's time went, in seconds: the host's phases around the backend's
/// (PassTimes). Summed over a run in ServeResult::phases.
struct PhaseTimes {
  double schedule = 0;  ///< host: arrivals, the policy's schedule(), the sampling jobs
  double prepare = 0;   ///< host: the cache's prepare() and, on a GPU, the pass's one upload
  double forward = 0;   ///< the model: device time on a GPU (events), wall time on the CPU
  double sample = 0;  ///< choosing the tokens and bringing them to the host (device time on a GPU)
  double record = 0;  ///< host: the tokens taken, append or finish, the requests' records
  double wall = 0;    ///< the whole step (waiting for an arrival is not a step's time)
  /// \brief What the others leave of wall: on a GPU the launches' host time that the device did
  /// not hide and the wait for it, and a hook's full-logits download.
  [[nodiscard]] double other() const {
    return wall - schedule - prepare - forward - sample - record;
  }
  /// \brief Adds `o`'s phases to these.
  PhaseTimes& operator+=(const PhaseTimes& o);
};

/// \brief What became of one request.
struct RequestRecord {
  std::vector<int> generated;  ///< sampled tokens, without a stop token
  /// \brief The top-2 logit gap (top2_gap) of every logit row a token was chosen from, a stop
  /// token's included: how near a tie each choice was.
  std::vector<float> top2_gaps;
  std::string status = "waiting";     ///< stop token, max_new_tokens, not admitted
  long arrival_step = 0;              ///< step at which it was submitted
  long first_token_step = -1;         ///< step whose pass sampled its first token (-1: none)
  long finish_step = 0;               ///< the step after its last token (0: never finished)
  double arrival_seconds = 0;         ///< since the loop started (a wall-clock arrival: its time)
  double admitted_seconds = -1;       ///< since the loop started, when it first took memory
  double first_token_seconds = -1;    ///< since the loop started (-1: no token)
  double finish_seconds = 0;          ///< since the loop started
  std::vector<double> token_seconds;  ///< when each generated token was sampled, since the start
};

/// \brief The loop's state after one forward pass.
struct StepSample {
  long step = 0;            ///< the loop's step
  double seconds = 0;       ///< since the loop started, after the pass's tokens were taken
  int running = 0;          ///< requests holding memory
  int rows = 0;             ///< rows in the pass
  KvOccupancy kv;           ///< the policy's KV memory
  std::size_t kv_used = 0;  ///< bytes of it that hold a token (KvUsage::used)
  PhaseTimes phases;        ///< where the step's time went
};

/// \brief A finished run: every request's outcome and the loop's measurements.
struct ServeResult {
  std::vector<RequestRecord> requests;  ///< in request order
  std::vector<std::string> refusals;    ///< why each request turned away was, in order
  long steps = 0;                       ///< loop steps, idle ones included
  long finished = 0;                    ///< requests done or turned away
  long passes = 0;                      ///< forward passes
  long prefill_passes = 0;              ///< passes without a decode row
  long prefill_rows = 0;                ///< rows of prompts (and recomputation) over all passes
  long decode_rows = 0;                 ///< rows feeding a sampled token over all passes
  double prefill_seconds = 0;           ///< in prefill passes, sampling included
  double decode_seconds = 0;            ///< in the other passes, sampling included
  double seconds = 0;                   ///< the whole loop
  double positions_read = 0;            ///< sum over passes of the attention's positions per layer
  double decode_positions_read = 0;     ///< the same over passes with decode rows
  /// The part of decode_positions_read that shared levels read once, by level (top first).
  std::vector<double> decode_level_positions_read;
  /// \brief Over passes with decode rows, the sum of every row's position + 1: what they would
  /// read if no row shared a position with another.
  double decode_positions_unshared = 0;
  /// \brief Over all passes, the sum of every row's position + 1: the positions its attention
  /// attends to (its flops), however the cache reads them.
  double positions_attended = 0;
  KvUsage peak;                      ///< at the pass that used the most KV
  std::size_t peak_cached = 0;       ///< most bytes a prefix index alone kept at one pass
  int peak_running = 0;              ///< most requests holding memory at one pass
  std::vector<StepSample> timeline;  ///< one sample per forward pass
  PolicyCounters counters;           ///< the policy's, at the end
  PhaseTimes phases;                 ///< summed over the steps with a pass
  bool device_timed = false;         ///< forward and sample phases are a GPU's device times

  /// \brief Passes with decode rows.
  [[nodiscard]] long decode_passes() const { return passes - prefill_passes; }
  /// \brief Tokens generated over all requests.
  [[nodiscard]] long generated_tokens() const;
};

/// \brief Optional observers of a run (tests and benchmarks).
struct ServeHooks {
  /// \brief Sees each pass's plan and logits. When set, every pass's logits reach the host (on
  /// a GPU, a download of the whole [rows, vocab] array that the loop never makes otherwise); the
  /// tokens are chosen the same way either way.
  std::function<void(const StepPlan&, std::span<const float>)> on_logits;
  /// \brief Called after each step's tokens were handed to the policy, with the steps done.
  std::function<void(long)> after_step;
  /// \brief When set, a run longer than a few seconds writes a progress line here every few
  /// seconds, headed by `progress_label`: requests done, tokens so far and tokens/s.
  std::ostream* progress = nullptr;
  std::string progress_label;  ///< e.g. the program's name
};

/// \brief Serves `requests` through `policy` on `backend` until every one has finished or been
/// turned away. Each pass's tokens are chosen by the backend, where the logits are, from one job
/// per token: greedy, or a draw from the request's own seeded Sampler. Throws InputError for a
/// logit row that holds a NaN, and std::logic_error when the policy stops while requests wait.
ServeResult serve(ServingPolicy& policy, Backend& backend, const std::vector<Request>& requests,
                  const ModelConfig& config, const ServeHooks& hooks = {});

/// \brief Checks a prompt and token budget against the model's context; throws InputError for an
/// empty or too-long prompt and UsageError when the new tokens run past the context, naming them
/// as `what` says: the flag, or a workload line's field (parse_workload makes that InputError).
void check_generation_fits(std::size_t prompt_tokens, int max_new_tokens, const ModelConfig& c,
                           const std::string& what = "--max-new-tokens");

/// \brief Positions a generation of up to `max_new_tokens` after a prompt of `prompt_tokens`
/// stores at most: prompt + new - 1, since the last token generated is never fed back; 0 when
/// nothing is generated (the prompt is not even run then).
long positions_stored(std::size_t prompt_tokens, int max_new_tokens);

/// \brief Takes a sampled token into `generated` unless it ends the request. Returns "stop token"
/// (not added) for one of the model's stop ids unless the request ignores them, or for one of the
/// request's own stop_ids; "max_new_tokens" (added) for the last token allowed, and "" (added)
/// when the request goes on.
std::string take_token(int token, const ModelConfig& c, const Request& request,
                       std::vector<int>& generated);

}  // namespace kvheap
