// A STREAM-like read bandwidth probe: the peak that decode throughput is compared against.
#pragma once

#include <cstddef>

namespace kvheap {

/// \brief Result of a bandwidth probe.
struct BandwidthSample {
  double gbps = 0.0;      ///< best of the repeats, 1e9 bytes per second
  std::size_t bytes = 0;  ///< working-set size
  int threads = 0;        ///< OpenMP threads that read
};

/// \brief Size of the last-level cache in bytes (0 when the OS does not say).
std::size_t last_level_cache_bytes();

/// \brief Reads a buffer of `bytes` (default: 8x the last-level cache, clamped to [256 MiB, 1 GiB])
/// with all OpenMP threads, summing floats so the loads cannot be optimised away, and returns the
/// best rate of `repeats` passes. Each thread reads the slice it first touched, as the decode
/// matmul does with its slice of every weight matrix.
BandwidthSample measure_read_bandwidth(std::size_t bytes = 0, int repeats = 5);

}  // namespace kvheap
