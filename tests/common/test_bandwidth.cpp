// The read probe behind every "% of peak": it must read every float of its buffer exactly once,
// whatever the thread count and however the slices and streams divide the buffer, or the peak it
// reports is not the bandwidth of the bytes it claims to have read.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstddef>

#include "common/measure/bandwidth.hpp"

namespace kvheap {
namespace {

TEST(ReadProbe, EveryPassReadsEveryFloatOnce) {
  const int threads_before = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    // Sizes that leave remainders everywhere: fewer floats than threads, than one stream's lane
    // width, than four streams of 16, and sizes that divide by none of them.
    for (long n : {1L, 7L, 16L, 63L, 64L, 65L, 1000L, 4099L, 100003L}) {
      ReadProbe probe(static_cast<std::size_t>(n) * sizeof(float));
      ASSERT_EQ(probe.bytes(), static_cast<std::size_t>(n) * sizeof(float));
      const double gbps = probe.pass();
      EXPECT_TRUE(std::isfinite(gbps) && gbps > 0) << gbps;
      double expected = 0;  // the buffer holds i % 251; these sums are exact in float
      for (long i = 0; i < n; ++i) expected += static_cast<double>(i % 251);
      EXPECT_EQ(probe.last_sums()[0], expected)
          << "one stream, " << n << " floats, " << threads << " threads";
      EXPECT_EQ(probe.last_sums()[1], expected)
          << "four streams, " << n << " floats, " << threads << " threads";
    }
  }
  omp_set_num_threads(threads_before);
}

TEST(ReadProbe, MeasureReadBandwidthReportsItsBuffer) {
  const BandwidthSample s = measure_read_bandwidth(std::size_t{1} << 20, 2);
  EXPECT_EQ(s.bytes, std::size_t{1} << 20);
  EXPECT_GT(s.gbps, 0);
  EXPECT_GE(s.threads, 1);
}

}  // namespace
}  // namespace kvheap
