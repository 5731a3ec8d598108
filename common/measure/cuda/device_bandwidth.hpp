// The device's memory-bandwidth peak, measured the way decode uses memory: a large
// device-to-device copy.
#pragma once

#include <cstddef>

#include "common/measure/bandwidth.hpp"

namespace kvheap {

/// \brief Copies a `bytes`-sized device buffer into another `repeats` times and returns the best
/// rate, counting bytes read plus bytes written (2 x bytes per copy).
///
/// A copy is the simplest kernel that streams HBM at full speed in both directions; decode
/// attention and GEMV only read, so this is the yardstick GPU benchmarks quote against. In the
/// simulator the number is the host's memcpy speed, which means nothing for a GPU: callers must
/// label or refuse it (kvheap::is_simulator()).
BandwidthSample measure_copy_bandwidth(std::size_t bytes = std::size_t{1} << 30, int repeats = 5);

/// \brief The device's copy peak (measure_copy_bandwidth) and its L2.
MeasuredPeak gpu_copy_peak();

}  // namespace kvheap
