// Timing two device calls that do the same job two ways, side by side: each call after an L2
// flush, event-timed on one stream, the order alternating from pair to pair so that neither call
// always runs second (on a warmer clock, or after the other's writes). Medians of each.
#pragma once

#include <benchmark/benchmark.h>

#include <vector>

#include "bench/support/block_sweep.hpp"
#include "common/measure/cuda/l2_flush.hpp"
#include "device/device.hpp"

namespace kvheap::bench {

/// \brief Medians, in milliseconds, of the two calls of timed_pair.
struct PairTiming {
  double a_ms = 0.0;  ///< the first call passed
  double b_ms = 0.0;  ///< the second call passed
};

/// \brief Times `a` and `b` (each enqueues its work on `stream`) once per iteration of `state`,
/// in alternating order, each after an L2 flush; reports each pair's total as the iteration time
/// (use UseManualTime) and returns the medians.
template <class A, class B>
PairTiming timed_pair(benchmark::State& state, Stream& stream, A&& a, B&& b) {
  L2Flush flush(device_l2_bytes());
  Event start, stop;
  auto timed = [&](auto&& fn) {
    flush(stream);
    start.record(stream);
    fn();
    stop.record(stream);
    return static_cast<double>(elapsed_ms(start, stop));
  };
  std::vector<double> ta, tb;
  long pair = 0;  // state.iterations() stays 0 inside the loop: count here
  for (auto _ : state) {
    const bool b_first = pair++ % 2 == 1;
    if (b_first) tb.push_back(timed(b));
    ta.push_back(timed(a));
    if (!b_first) tb.push_back(timed(b));
    state.SetIterationTime((ta.back() + tb.back()) * 1e-3);
  }
  return {median(ta), median(tb)};
}

}  // namespace kvheap::bench
