// Serving latencies from a finished run, as serving benchmarks report them: time to first token
// (TTFT, from arrival), time per output token after the first (TPOT), the gaps between one
// request's tokens (inter-token latency, ITL), and the time a request waited before it took
// memory (queueing), each as a mean and percentiles over the run's requests.
#pragma once

#include <cstddef>
#include <vector>

#include "common/serving/serve.hpp"

namespace kvheap {

/// \brief The `p`-th percentile (0..100) of `samples`, interpolated linearly between the two
/// closest ranks (numpy's default); 0 for no samples.
[[nodiscard]] double percentile(std::vector<double> samples, double p);

/// \brief A sample's size, mean and percentiles.
struct Distribution {
  std::size_t count = 0;  ///< samples
  double mean = 0;        ///< 0 for no samples, as the percentiles
  double p50 = 0;         ///< median
  double p90 = 0;         ///< 90th percentile
  double p99 = 0;         ///< 99th percentile
};

/// \brief The distribution of `samples`.
[[nodiscard]] Distribution distribution(const std::vector<double>& samples);

/// \brief A run's latencies, in seconds.
struct Latencies {
  Distribution ttft;      ///< first token sampled - arrival (a stop token counts)
  Distribution tpot;      ///< (last token - first token) / (tokens - 1), over requests with two+
  Distribution itl;       ///< every gap between two consecutive tokens of one request
  Distribution queueing;  ///< first taking memory - arrival, over requests that took memory
};

/// \brief The latencies of `result`'s requests.
[[nodiscard]] Latencies latencies(const ServeResult& result);

}  // namespace kvheap
