#include "common/serve.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <ostream>
#include <stdexcept>

#include "base/error.hpp"

namespace kvheap {

void ServingPolicy::add_json(nlohmann::json&, const ServeResult&) const {}
void ServingPolicy::add_request_json(int, nlohmann::json&) const {}
std::string ServingPolicy::describe_request(int) const { return ""; }
void ServingPolicy::print(std::ostream&, const ServeResult&) const {}

long ServeResult::generated_tokens() const {
  long n = 0;
  for (const RequestRecord& r : requests) n += static_cast<long>(r.generated.size());
  return n;
}

void check_generation_fits(std::size_t prompt_tokens, int max_new_tokens, const ModelConfig& c) {
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
    throw UsageError(fmt::format("--max-new-tokens must be >= 0, got {}", max_new_tokens));
  // The last generated token is never fed back, so the context must hold prompt + new - 1.
  if (positions_stored(prompt_tokens, max_new_tokens) > c.max_seq_len) {
    const std::size_t room = static_cast<std::size_t>(c.max_seq_len) - prompt_tokens + 1;
    throw UsageError(
        fmt::format("--max-new-tokens {} runs past the context: the prompt uses {} of "
                    "{} positions, so at most {} new tokens fit",
                    max_new_tokens, prompt_tokens, c.max_seq_len, room));
  }
}

long positions_stored(std::size_t prompt_tokens, int max_new_tokens) {
  return max_new_tokens > 0 ? static_cast<long>(prompt_tokens) + max_new_tokens - 1 : 0;
}

std::string take_token(int token, const ModelConfig& c, const Request& request,
                       std::vector<int>& generated) {
  const bool is_stop = std::find(c.stop_ids.begin(), c.stop_ids.end(), token) != c.stop_ids.end();
  if (is_stop && !request.ignore_eos) return "stop token";
  generated.push_back(token);
  return static_cast<int>(generated.size()) == request.max_new_tokens ? "max_new_tokens" : "";
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

ServeResult serve(ServingPolicy& policy, Backend& backend, const std::vector<Request>& requests,
                  const ModelConfig& config, const ServeHooks& hooks) {
  const std::size_t n = requests.size();
  ServeResult res;
  res.requests.resize(n);
  std::vector<Sampler> samplers;
  samplers.reserve(n);
  bool greedy = !hooks.on_logits;
  std::vector<std::vector<int>> forks(n);  // requests forked from each request's prompt pass
  for (std::size_t i = 0; i < n; ++i) {
    const Request& r = requests[i];
    samplers.emplace_back(r.sampling);  // UsageError for a bad temperature or top-p
    greedy = greedy && r.sampling.temperature == 0.0f;
    if (r.fork_of >= 0) {
      if (r.fork_of >= static_cast<int>(i))
        throw std::logic_error(
            fmt::format("request {} forks request {}, which is not before it", i, r.fork_of));
      forks[r.fork_of].push_back(static_cast<int>(i));
    }
  }
  std::vector<char> started(n, 0);  // a token was sampled for it

  const Clock::time_point t0 = Clock::now();
  long step = 0;
  std::size_t next = 0;  // next request to arrive
  bool sampled_usage = false;
  while (true) {
    // Arrivals: request i comes in before its arrival step; an idle server skips ahead to it.
    if (policy.idle() && next < n) step = std::max(step, requests[next].arrival_step);
    for (; next < n && requests[next].arrival_step <= step; ++next) {
      RequestRecord& rec = res.requests[next];
      rec.arrival_step = step;
      rec.arrival_seconds = seconds_between(t0, Clock::now());
      if (requests[next].max_new_tokens == 0) {  // nothing to generate, so nothing runs
        rec.status = "max_new_tokens";
        continue;
      }
      policy.submit(static_cast<int>(next), requests[next]);
    }
    const Clock::time_point pass_start = Clock::now();
    const StepPlan plan = policy.schedule();
    for (const auto& [id, why] : plan.refused) {
      res.requests[id].status = "not admitted";
      if (!why.empty()) res.refusals.push_back(why);
    }
    if (plan.batch.rows.empty()) {
      if (next == n && policy.idle()) break;
      if (next == n)
        throw std::logic_error(
            "serve: the policy planned nothing while requests wait and none is still to come");
      ++step;
      continue;
    }

    // The pass: ids on the device when every request is greedy, else logits to sample from.
    std::vector<int> ids;
    std::span<const float> logits;
    if (greedy) {
      ids = backend.forward_greedy(plan.batch, policy.cache());
    } else {
      logits = backend.forward(plan.batch, policy.cache());
      if (hooks.on_logits) hooks.on_logits(plan, logits);
    }
    const KvUsage usage = policy.usage();
    if (!sampled_usage || usage.used > res.peak.used) res.peak = usage;
    sampled_usage = true;
    res.peak_running = std::max(res.peak_running, policy.running());
    const double positions = static_cast<double>(policy.cache().positions_read());
    res.positions_read += positions;
    if (plan.decode_rows > 0) res.decode_positions_read += positions;

    // Each logit row's token, for its request and the requests forked from its prompt pass.
    const auto vocab = static_cast<std::size_t>(config.vocab_size);
    const auto take = [&](int id, std::size_t row) {
      const int token = greedy ? ids[row] : samplers[id].sample(logits.subspan(row * vocab, vocab));
      RequestRecord& rec = res.requests[id];
      if (!started[id]) {
        started[id] = 1;
        rec.first_token_step = step;
        rec.first_token_seconds = seconds_between(t0, Clock::now());
      }
      const std::string done = take_token(token, config, requests[id], rec.generated);
      if (done.empty()) {
        rec.status = "running";
        policy.append(id, token);
        return;
      }
      rec.status = done;
      rec.finish_step = step + 1;
      rec.finish_seconds = seconds_between(t0, Clock::now());
      policy.finish(id);
    };
    for (std::size_t j = 0; j < plan.logit_requests.size(); ++j) {
      const int id = plan.logit_requests[j];
      const bool first = !started[id];
      take(id, j);
      if (first)
        for (const int child : forks[id]) take(child, j);
    }

    ++res.passes;
    res.prefill_rows += plan.prefill_rows;
    res.decode_rows += plan.decode_rows;
    const double pass_seconds = seconds_between(pass_start, Clock::now());
    if (plan.decode_rows == 0) {
      ++res.prefill_passes;
      res.prefill_seconds += pass_seconds;
    } else {
      res.decode_seconds += pass_seconds;
    }
    ++step;
    if (hooks.after_step) hooks.after_step(step);
  }
  res.seconds = seconds_between(t0, Clock::now());
  res.steps = step;
  policy.check_drained();
  return res;
}

}  // namespace kvheap
