// The working-set sizes that the bandwidth probe and the CPU attention benchmarks choose, for the
// hosts they were written for: a 32 MiB L3 in 24 GiB, a 260 MiB shared L3 (where a fixed 1 GiB
// cap left the benchmarks' grids empty), and hosts too small for a cold set at all.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "common/measure/working_set.hpp"

namespace kvheap {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;

TEST(ReadProbeDefault, EightTimesTheCacheWithinItsBounds) {
  EXPECT_EQ(read_probe_default_bytes(32 * kMiB, 24 * kGiB), 256 * kMiB);
  EXPECT_EQ(read_probe_default_bytes(64 * kMiB, 24 * kGiB), 512 * kMiB);
  EXPECT_EQ(read_probe_default_bytes(0, 24 * kGiB), 256 * kMiB);  // cache unknown: the floor
  // 260 MiB of L3 in 24 GiB: 8x is 2080 MiB, past 1 GiB but under an eighth of memory (3 GiB).
  EXPECT_EQ(read_probe_default_bytes(260 * kMiB, 24 * kGiB), 2080 * kMiB);
  // The same cache in 4 GiB: 1 GiB, the cap that holds whatever the memory.
  EXPECT_EQ(read_probe_default_bytes(260 * kMiB, 4 * kGiB), kGiB);
  EXPECT_EQ(read_probe_default_bytes(260 * kMiB, 0), kGiB);  // memory unknown
}

TEST(ColdSetWindow, FromFourTimesTheCacheToTheCap) {
  const ColdSetWindow w = cold_set_window(kGiB, 32 * kMiB, 24 * kGiB);
  EXPECT_EQ(w.min, 128 * kMiB);
  EXPECT_EQ(w.max, kGiB);
  EXPECT_EQ(w.allocation_cap, 12 * kGiB);
  EXPECT_EQ(w.skip_reason("a", 128 * kMiB, kGiB), "");
  EXPECT_EQ(w.skip_reason("a", kGiB, kGiB), "");
  EXPECT_EQ(w.skip_reason("small", 127 * kMiB, kGiB),
            "small: skipped, K+V working set 127 MiB is outside [4 x LLC = 128 MiB, 1024 MiB]");
  EXPECT_NE(w.skip_reason("large", kGiB + 1, kGiB).find("outside"), std::string::npos);
  EXPECT_EQ(w.skip_reason("reserves", 512 * kMiB, 13 * kGiB),
            "reserves: skipped, it allocates 13312 MiB, more than half of this host's memory");
  EXPECT_EQ(cold_set_window(kGiB, 0, 24 * kGiB).min, 128 * kMiB);  // unknown cache: 32 MiB
}

TEST(ColdSetWindow, CapRisesForALargeCacheButNotPastAnEighthOfMemory) {
  // 260 MiB of L3: the floor, 1040 MiB, is above a 1 GiB cap, which rises to twice the floor.
  const ColdSetWindow big = cold_set_window(kGiB, 260 * kMiB, 24 * kGiB);
  EXPECT_EQ(big.min, 1040 * kMiB);
  EXPECT_EQ(big.max, 2080 * kMiB);
  EXPECT_EQ(big.skip_reason("b8 ctx32768 fp32", 2 * kGiB, 4 * kGiB), "");
  // In 12 GiB an eighth of memory, 1536 MiB, is the ceiling.
  EXPECT_EQ(cold_set_window(kGiB, 260 * kMiB, 12 * kGiB).max, 1536 * kMiB);
  // A cap above twice the floor stays as it is.
  EXPECT_EQ(cold_set_window(4 * kGiB, 32 * kMiB, 64 * kGiB).max, 4 * kGiB);
}

TEST(ColdSetWindow, SaysWhenMemoryCannotHoldAColdSet) {
  // 4 GiB with 260 MiB of L3: an eighth of memory (512 MiB) is under the 1040 MiB floor.
  const ColdSetWindow w = cold_set_window(kGiB, 260 * kMiB, 4 * kGiB);
  EXPECT_LT(w.max, w.min);
  EXPECT_EQ(w.skip_reason("any", 1040 * kMiB, 1040 * kMiB),
            "any: skipped, this host's memory cannot hold a working set of 4 x LLC = 1040 MiB");
  EXPECT_FALSE(w.admits("any", 1040 * kMiB, 1040 * kMiB));
}

TEST(ColdSetWindow, UnknownMemoryCapsNothing) {
  const ColdSetWindow w = cold_set_window(kGiB, 32 * kMiB, 0);
  EXPECT_EQ(w.max, kGiB);
  EXPECT_EQ(w.allocation_cap, 0U);
  EXPECT_EQ(w.skip_reason("a", 256 * kMiB, std::size_t{1} << 50), "");
}

}  // namespace
}  // namespace kvheap
