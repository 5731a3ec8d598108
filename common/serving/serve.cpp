#include "common/serving/serve.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "base/error.hpp"
#include "common/serving/recorder.hpp"

namespace kvheap {

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

ServeResult serve(ServingPolicy& policy, Backend& backend, const std::vector<Request>& requests,
                  const ModelConfig& config, const ServeHooks& hooks) {
  Recorder rec(requests, config, hooks);  // the clock, samplers, forks, timeline and progress
  const std::size_t n = requests.size();
  std::size_t next = 0;  // the next request to arrive
  long step = 0;
  while (true) {
    // Arrive: the policy takes every request that has arrived.
    if (policy.idle() && next < n) rec.wait_for(next, step);
    for (; next < n && rec.arrived(next, step); ++next)
      if (rec.arrive(next, step)) policy.submit(static_cast<int>(next), requests[next]);
    // Schedule: the rows of the next pass.
    rec.start_step();
    const StepPlan plan = policy.schedule();
    rec.scheduled(plan);
    if (plan.batch.rows.empty()) {
      if (next == n && policy.idle()) break;
      if (next == n)
        throw std::logic_error(
            "serve: the policy planned nothing while requests wait and none is still to come");
      if (requests[next].arrival_seconds >= 0) rec.wait_for(next, step);
      ++step;
      continue;
    }
    // Prepare: the cache lays out the batch (new blocks, copies on write, the kernels' view).
    const std::vector<SamplingJob>& jobs = rec.jobs_for(plan);
    backend.prepare(plan.batch, policy.cache());
    // Forward and sample: the model runs, and each job's token is chosen where the logits are.
    const std::span<const SampledToken> picks = backend.forward(plan.batch, policy.cache(), jobs);
    if (hooks.on_logits) hooks.on_logits(plan, backend.logits());
    rec.passed(plan, policy, backend);
    // Append or finish: each token goes back to its request.
    for (std::size_t k = 0; k < jobs.size(); ++k) {
      const Recorder::Taken t = rec.take(k, picks[k], step);
      if (t.done.empty()) {
        policy.append(t.request, t.token);
      } else {
        policy.finish(t.request);
      }
    }
    rec.end_step(plan, step);
    ++step;
  }
  return rec.finish(policy, step);
}

}  // namespace kvheap
