// A multiply-add throughput probe: the compute roof that CPU kernels are compared against, beside
// the read bandwidth of common/measure/bandwidth.hpp.
#pragma once

namespace kvheap {

/// \brief Result of a multiply-add throughput probe.
struct FmaSample {
  double gflops =
      0.0;          ///< best of the repeats, 1e9 fp32 operations per second (a multiply-add is 2)
  int threads = 0;  ///< OpenMP threads that computed
};

/// \brief Runs independent chains of fp32 multiply-adds as wide as the CPU attention twin's widest
/// vectors (16 floats with AVX-512, else 8) on every OpenMP thread, enough chains to hide the
/// instruction's latency so that the rate is the units' throughput, and returns the best rate of
/// `repeats` passes of a few tens of milliseconds each.
///
/// With the read bandwidth it gives a kernel's roofline: a kernel doing F flops per byte it reads
/// can reach at most min(bandwidth, gflops / F).
FmaSample measure_fma_peak(int repeats = 3);

}  // namespace kvheap
