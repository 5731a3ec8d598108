#include "common/serving/recorder.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <ostream>
#include <stdexcept>
#include <thread>
#include <utility>

namespace kvheap {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

/// Writes a progress line every few seconds once a run has taken a few.
class Recorder::Progress {
 public:
  Progress(std::ostream* os, std::string label, std::size_t requests)
      : os_(os), label_(std::move(label)), requests_(requests) {}
  void update(const ServeResult& res, double now) {
    if (os_ == nullptr || now < next_) return;
    next_ = now + kEvery;
    const long tokens = res.generated_tokens();
    fmt::print(*os_, "{}: {} of {} requests done, {} tokens in {:.1f} s = {:.1f} tokens/s so far\n",
               label_, res.finished, requests_, tokens, now, tokens / now);
    os_->flush();
  }
  /// A line while the loop sleeps for request `request`, due at `at` s: when the wait is long
  /// (kFirst s or more), then every kEvery s of it.
  void waiting(std::size_t request, double at, double now) {
    if (os_ == nullptr || now < next_wait_ || at - now < kFirst) return;
    next_wait_ = now + kEvery;
    fmt::print(*os_, "{}: waiting for request {}, which arrives at {:.1f} s ({:.1f} s from now)\n",
               label_, request, at, at - now);
    os_->flush();
  }

 private:
  static constexpr double kFirst = 3.0, kEvery = 5.0;
  std::ostream* os_;
  std::string label_;
  std::size_t requests_;
  double next_ = kFirst;
  double next_wait_ = 0.0;
};

Recorder::Recorder(const std::vector<Request>& requests, const ModelConfig& config,
                   const ServeHooks& hooks)
    : requests_(requests),
      config_(config),
      hooks_(hooks),
      forks_(requests.size()),
      started_(requests.size(), 0),
      t0_(Clock::now()),
      progress_(std::make_unique<Progress>(hooks.progress, hooks.progress_label, requests.size())) {
  const std::size_t n = requests.size();
  res_.requests.resize(n);
  samplers_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Request& r = requests[i];
    samplers_.emplace_back(r.sampling);  // UsageError for a bad temperature or top-p
    if (r.fork_of >= 0) {
      if (r.fork_of >= static_cast<int>(i))
        throw std::logic_error(
            fmt::format("request {} forks request {}, which is not before it", i, r.fork_of));
      forks_[r.fork_of].push_back(static_cast<int>(i));
    }
  }
}

Recorder::~Recorder() = default;

double Recorder::now() const { return seconds_between(t0_, Clock::now()); }

bool Recorder::arrived(std::size_t i, long step) const {
  const Request& r = requests_[i];
  return r.arrival_seconds >= 0 ? now() >= r.arrival_seconds : r.arrival_step <= step;
}

void Recorder::wait_for(std::size_t i, long& step) {
  const Request& r = requests_[i];
  if (r.arrival_seconds < 0) {
    step = std::max(step, r.arrival_step);
    return;
  }
  // In steps of at most a second, so that a long wait says what it waits for (arrivals are at
  // most kMaxArrivalSeconds, parse_workload's bound).
  const Clock::time_point due = t0_ + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(r.arrival_seconds));
  for (Clock::time_point t = Clock::now(); t < due; t = Clock::now()) {
    progress_->waiting(i, r.arrival_seconds, seconds_between(t0_, t));
    std::this_thread::sleep_until(std::min(due, t + std::chrono::seconds(1)));
  }
}

bool Recorder::arrive(std::size_t i, long step) {
  RequestRecord& rec = res_.requests[i];
  rec.arrival_step = step;
  rec.arrival_seconds = requests_[i].arrival_seconds >= 0 ? requests_[i].arrival_seconds : now();
  if (requests_[i].max_new_tokens > 0) return true;
  rec.status = "max_new_tokens";  // nothing to generate, so nothing runs
  ++res_.finished;
  return false;
}

void Recorder::start_step() { pass_start_ = Clock::now(); }

void Recorder::scheduled(const StepPlan& plan) {
  for (const auto& [id, why] : plan.refused) {
    res_.requests[id].status = "not admitted";
    ++res_.finished;
    if (!why.empty()) res_.refusals.push_back(why);
  }
  for (const int id : plan.admitted) {
    RequestRecord& rec = res_.requests[id];
    if (rec.admitted_seconds < 0) rec.admitted_seconds = seconds_between(t0_, pass_start_);
    for (const int child : forks_[id])
      if (res_.requests[child].admitted_seconds < 0)
        res_.requests[child].admitted_seconds = rec.admitted_seconds;
  }
}

const std::vector<SamplingJob>& Recorder::jobs_for(const StepPlan& plan) {
  jobs_.clear();
  job_request_.clear();
  for (std::size_t j = 0; j < plan.logit_requests.size(); ++j) {
    const int id = plan.logit_requests[j];
    jobs_.push_back(samplers_[id].job(static_cast<int>(j)));
    job_request_.push_back(id);
    if (!started_[id])
      for (const int child : forks_[id]) {
        jobs_.push_back(samplers_[child].job(static_cast<int>(j)));
        job_request_.push_back(child);
      }
  }
  forward_start_ = Clock::now();
  return jobs_;
}

void Recorder::passed(const StepPlan& plan, ServingPolicy& policy, const Backend& backend) {
  times_ = backend.last_times();
  snapshot_ = policy.snapshot();
  if (!sampled_usage_ || snapshot_.usage.used > res_.peak.used) res_.peak = snapshot_.usage;
  sampled_usage_ = true;
  res_.peak_cached = std::max(res_.peak_cached, snapshot_.occupancy.cached);
  res_.peak_running = std::max(res_.peak_running, snapshot_.running);
  const double positions = static_cast<double>(policy.cache().positions_read());
  res_.positions_read += positions;
  for (const BatchRow& row : plan.batch.rows) res_.positions_attended += row.pos + 1;
  if (plan.decode_rows > 0) {
    res_.decode_positions_read += positions;
    const std::vector<long> levels = policy.cache().shared_positions_read();
    if (levels.size() > res_.decode_level_positions_read.size())
      res_.decode_level_positions_read.resize(levels.size(), 0.0);
    for (std::size_t l = 0; l < levels.size(); ++l)
      res_.decode_level_positions_read[l] += static_cast<double>(levels[l]);
    for (const BatchRow& row : plan.batch.rows) res_.decode_positions_unshared += row.pos + 1;
  }
  record_start_ = Clock::now();
  sampled_at_ = seconds_between(t0_, record_start_);
}

Recorder::Taken Recorder::take(std::size_t k, const SampledToken& pick, long step) {
  const int id = job_request_[k];
  // The message is formatted only for a pick that failed: this runs once per token.
  const int token = pick.token >= 0
                        ? pick.token
                        : checked_token(pick, fmt::format("the logits of request {}", id));
  RequestRecord& rec = res_.requests[id];
  rec.top2_gaps.push_back(top2_gap(pick));
  if (!started_[id]) {
    started_[id] = 1;
    rec.first_token_step = step;
    rec.first_token_seconds = sampled_at_;
  }
  std::string done = take_token(token, config_, requests_[id], rec.generated);
  if (rec.token_seconds.size() < rec.generated.size()) rec.token_seconds.push_back(sampled_at_);
  if (done.empty()) {
    rec.status = "running";
  } else {
    rec.status = done;
    rec.finish_step = step + 1;
    rec.finish_seconds = sampled_at_;
    ++res_.finished;
  }
  return {id, token, std::move(done)};
}

void Recorder::end_step(const StepPlan& plan, long step) {
  ++res_.passes;
  res_.prefill_rows += plan.prefill_rows;
  res_.decode_rows += plan.decode_rows;
  const Clock::time_point pass_end = Clock::now();
  const double pass_seconds = seconds_between(pass_start_, pass_end);
  if (plan.decode_rows == 0) {
    ++res_.prefill_passes;
    res_.prefill_seconds += pass_seconds;
  } else {
    res_.decode_seconds += pass_seconds;
  }
  PhaseTimes phases;
  phases.schedule = seconds_between(pass_start_, forward_start_);
  phases.prepare = times_.prepare;
  phases.forward = times_.forward;
  phases.sample = times_.sample;
  phases.record = seconds_between(record_start_, pass_end);
  phases.wall = pass_seconds;
  res_.phases += phases;
  res_.device_timed = times_.device_timed;
  res_.timeline.push_back({step, sampled_at_, snapshot_.running,
                           static_cast<int>(plan.batch.rows.size()), snapshot_.occupancy,
                           snapshot_.usage.used, phases});
  if (hooks_.after_step) hooks_.after_step(step + 1);
  progress_->update(res_, sampled_at_);
}

ServeResult Recorder::finish(ServingPolicy& policy, long steps) {
  res_.seconds = now();
  res_.steps = steps;
  res_.counters = policy.stats().counters;
  policy.check_drained();
  return std::move(res_);
}

}  // namespace kvheap
