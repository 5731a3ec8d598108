#include "common/serving/serve.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <ostream>
#include <stdexcept>
#include <thread>

#include "base/error.hpp"

namespace kvheap {

void ServingPolicy::add_json(nlohmann::json&, const ServeResult&) const {}
void ServingPolicy::add_request_json(int, nlohmann::json&) const {}
std::string ServingPolicy::describe_request(int) const { return ""; }

KvOccupancy ServingPolicy::occupancy() {
  const std::size_t held = usage().reserved, budget = budget_bytes();
  return {held, 0, budget > held ? budget - held : 0};
}
void ServingPolicy::print(std::ostream&, const ServeResult&) const {}

PhaseTimes& PhaseTimes::operator+=(const PhaseTimes& o) {
  schedule += o.schedule;
  prepare += o.prepare;
  forward += o.forward;
  sample += o.sample;
  record += o.record;
  wall += o.wall;
  return *this;
}

long ServeResult::generated_tokens() const {
  long n = 0;
  for (const RequestRecord& r : requests) n += static_cast<long>(r.generated.size());
  return n;
}

void check_generation_fits(std::size_t prompt_tokens, int max_new_tokens, const ModelConfig& c,
                           const std::string& what) {
  if (prompt_tokens == 0)
    throw InputError(
        "the prompt is empty: give --prompt text or --prompt-ids with at least one "
        "token (e.g. the BOS id 1)");
  if (prompt_tokens > static_cast<std::size_t>(c.max_seq_len))
    throw InputError(
        fmt::format("the prompt has {} tokens but the model's context holds {} "
                    "(max_seq_len); shorten the prompt",
                    prompt_tokens, c.max_seq_len));
  if (max_new_tokens < 0)
    throw UsageError(fmt::format("{} must be >= 0, got {}", what, max_new_tokens));
  // The last generated token is never fed back, so the context must hold prompt + new - 1.
  if (positions_stored(prompt_tokens, max_new_tokens) > c.max_seq_len) {
    const std::size_t room = static_cast<std::size_t>(c.max_seq_len) - prompt_tokens + 1;
    throw UsageError(
        fmt::format("{} {} runs past the context: the prompt uses {} of "
                    "{} positions, so at most {} new tokens fit",
                    what, max_new_tokens, prompt_tokens, c.max_seq_len, room));
  }
}

long positions_stored(std::size_t prompt_tokens, int max_new_tokens) {
  return max_new_tokens > 0 ? static_cast<long>(prompt_tokens) + max_new_tokens - 1 : 0;
}

std::string take_token(int token, const ModelConfig& c, const Request& request,
                       std::vector<int>& generated) {
  const auto stops = [token](const std::vector<int>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  if ((stops(c.stop_ids) && !request.ignore_eos) || stops(request.stop_ids)) return "stop token";
  generated.push_back(token);
  return static_cast<int>(generated.size()) == request.max_new_tokens ? "max_new_tokens" : "";
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// Writes a progress line every few seconds once a run has taken a few.
class Progress {
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

}  // namespace

ServeResult serve(ServingPolicy& policy, Backend& backend, const std::vector<Request>& requests,
                  const ModelConfig& config, const ServeHooks& hooks) {
  const std::size_t n = requests.size();
  ServeResult res;
  res.requests.resize(n);
  std::vector<Sampler> samplers;
  samplers.reserve(n);
  std::vector<std::vector<int>> forks(n);  // requests forked from each request's prompt pass
  for (std::size_t i = 0; i < n; ++i) {
    const Request& r = requests[i];
    samplers.emplace_back(r.sampling);  // UsageError for a bad temperature or top-p
    if (r.fork_of >= 0) {
      if (r.fork_of >= static_cast<int>(i))
        throw std::logic_error(
            fmt::format("request {} forks request {}, which is not before it", i, r.fork_of));
      forks[r.fork_of].push_back(static_cast<int>(i));
    }
  }
  std::vector<char> started(n, 0);  // a token was sampled for it

  const Clock::time_point t0 = Clock::now();
  const auto now = [&] { return seconds_between(t0, Clock::now()); };
  Progress progress(hooks.progress, hooks.progress_label, n);
  long step = 0;
  std::size_t next = 0;  // next request to arrive
  // Request i arrives at its wall-clock time, else before its step.
  const auto arrived = [&](const Request& r) {
    return r.arrival_seconds >= 0 ? now() >= r.arrival_seconds : r.arrival_step <= step;
  };
  // Nothing can run until request `next` arrives: skip ahead to its step, or sleep until its time.
  const auto wait_for_next = [&] {
    const Request& r = requests[next];
    if (r.arrival_seconds < 0) {
      step = std::max(step, r.arrival_step);
      return;
    }
    // In steps of at most a second, so that a long wait says what it waits for (arrivals are at
    // most kMaxArrivalSeconds, parse_workload's bound).
    const Clock::time_point due = t0 + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(r.arrival_seconds));
    for (Clock::time_point t = Clock::now(); t < due; t = Clock::now()) {
      progress.waiting(next, r.arrival_seconds, seconds_between(t0, t));
      std::this_thread::sleep_until(std::min(due, t + std::chrono::seconds(1)));
    }
  };
  bool sampled_usage = false;
  std::vector<SamplingJob> jobs;  // one per token the pass chooses
  std::vector<int> job_request;   // whose token each job chooses
  while (true) {
    if (policy.idle() && next < n) wait_for_next();
    for (; next < n && arrived(requests[next]); ++next) {
      RequestRecord& rec = res.requests[next];
      rec.arrival_step = step;
      rec.arrival_seconds =
          requests[next].arrival_seconds >= 0 ? requests[next].arrival_seconds : now();
      if (requests[next].max_new_tokens == 0) {  // nothing to generate, so nothing runs
        rec.status = "max_new_tokens";
        ++res.finished;
        continue;
      }
      policy.submit(static_cast<int>(next), requests[next]);
    }
    const Clock::time_point pass_start = Clock::now();
    const StepPlan plan = policy.schedule();
    for (const auto& [id, why] : plan.refused) {
      res.requests[id].status = "not admitted";
      ++res.finished;
      if (!why.empty()) res.refusals.push_back(why);
    }
    for (const int id : plan.admitted) {
      RequestRecord& rec = res.requests[id];
      if (rec.admitted_seconds < 0) rec.admitted_seconds = seconds_between(t0, pass_start);
      for (const int child : forks[id])
        if (res.requests[child].admitted_seconds < 0)
          res.requests[child].admitted_seconds = rec.admitted_seconds;
    }
    if (plan.batch.rows.empty()) {
      if (next == n && policy.idle()) break;
      if (next == n)
        throw std::logic_error(
            "serve: the policy planned nothing while requests wait and none is still to come");
      if (requests[next].arrival_seconds >= 0) wait_for_next();
      ++step;
      continue;
    }

    // One job per token to choose: each logit row's request, and on a prompt pass the requests
    // forked from it (their first token comes from the same row, drawn with their own seed).
    jobs.clear();
    job_request.clear();
    for (std::size_t j = 0; j < plan.logit_requests.size(); ++j) {
      const int id = plan.logit_requests[j];
      jobs.push_back(samplers[id].job(static_cast<int>(j)));
      job_request.push_back(id);
      if (!started[id])
        for (const int child : forks[id]) {
          jobs.push_back(samplers[child].job(static_cast<int>(j)));
          job_request.push_back(child);
        }
    }

    // The pass: its tokens are chosen where the logits are.
    const Clock::time_point forward_start = Clock::now();
    const std::span<const SampledToken> picks = backend.forward(plan.batch, policy.cache(), jobs);
    const PassTimes times = backend.last_times();
    if (hooks.on_logits) hooks.on_logits(plan, backend.logits());
    const KvUsage usage = policy.usage();
    if (!sampled_usage || usage.used > res.peak.used) res.peak = usage;
    sampled_usage = true;
    const KvOccupancy occupancy = policy.occupancy();
    const int running = policy.running();
    res.peak_running = std::max(res.peak_running, running);
    const double positions = static_cast<double>(policy.cache().positions_read());
    res.positions_read += positions;
    if (plan.decode_rows > 0) res.decode_positions_read += positions;

    // Each job's token, for its request.
    const Clock::time_point record_start = Clock::now();
    const double sampled_at = seconds_between(t0, record_start);
    for (std::size_t k = 0; k < jobs.size(); ++k) {
      const int id = job_request[k];
      const int token = checked_token(picks[k], fmt::format("the logits of request {}", id));
      RequestRecord& rec = res.requests[id];
      rec.top2_gaps.push_back(top2_gap(picks[k]));
      if (!started[id]) {
        started[id] = 1;
        rec.first_token_step = step;
        rec.first_token_seconds = sampled_at;
      }
      const std::string done = take_token(token, config, requests[id], rec.generated);
      if (rec.token_seconds.size() < rec.generated.size()) rec.token_seconds.push_back(sampled_at);
      if (done.empty()) {
        rec.status = "running";
        policy.append(id, token);
        continue;
      }
      rec.status = done;
      rec.finish_step = step + 1;
      rec.finish_seconds = sampled_at;
      ++res.finished;
      policy.finish(id);
    }

    ++res.passes;
    res.prefill_rows += plan.prefill_rows;
    res.decode_rows += plan.decode_rows;
    const Clock::time_point pass_end = Clock::now();
    const double pass_seconds = seconds_between(pass_start, pass_end);
    if (plan.decode_rows == 0) {
      ++res.prefill_passes;
      res.prefill_seconds += pass_seconds;
    } else {
      res.decode_seconds += pass_seconds;
    }
    PhaseTimes phases;
    phases.schedule = seconds_between(pass_start, forward_start);
    phases.prepare = times.prepare;
    phases.forward = times.forward;
    phases.sample = times.sample;
    phases.record = seconds_between(record_start, pass_end);
    phases.wall = pass_seconds;
    res.phases += phases;
    res.device_timed = times.device_timed;
    res.timeline.push_back({step, sampled_at, running, static_cast<int>(plan.batch.rows.size()),
                            occupancy, usage.used, phases});
    ++step;
    if (hooks.after_step) hooks.after_step(step);
    progress.update(res, sampled_at);
  }
  res.seconds = now();
  res.steps = step;
  res.counters = policy.counters();
  policy.check_drained();
  return res;
}

}  // namespace kvheap
