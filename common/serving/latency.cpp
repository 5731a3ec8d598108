#include "common/serving/latency.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvheap {

double percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(samples.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(rank));
  const std::size_t above = std::min(below + 1, samples.size() - 1);
  const double frac = rank - static_cast<double>(below);
  return samples[below] + frac * (samples[above] - samples[below]);
}

Distribution distribution(const std::vector<double>& samples) {
  Distribution d;
  d.count = samples.size();
  if (samples.empty()) return d;
  d.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(d.count);
  d.p50 = percentile(samples, 50);
  d.p90 = percentile(samples, 90);
  d.p99 = percentile(samples, 99);
  return d;
}

Latencies latencies(const ServeResult& result) {
  std::vector<double> ttft, tpot, itl, queueing;
  for (const RequestRecord& r : result.requests) {
    if (r.admitted_seconds >= 0) queueing.push_back(r.admitted_seconds - r.arrival_seconds);
    if (r.first_token_seconds >= 0) ttft.push_back(r.first_token_seconds - r.arrival_seconds);
    const std::vector<double>& t = r.token_seconds;
    if (t.size() < 2) continue;
    tpot.push_back((t.back() - t.front()) / static_cast<double>(t.size() - 1));
    for (std::size_t i = 1; i < t.size(); ++i) itl.push_back(t[i] - t[i - 1]);
  }
  return {distribution(ttft), distribution(tpot), distribution(itl), distribution(queueing)};
}

}  // namespace kvheap
