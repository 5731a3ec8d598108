// What a chapter's program says about its bandwidth: the fraction of the measured peak, and the
// warning that a step small enough to stay in the cache in front of that memory measures the
// cache (a 61 MB model on a CPU with a 260 MiB L3 reached 119 % of the read peak).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>

#include "common/bandwidth.hpp"
#include "common/report.hpp"

namespace kvheap {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(MeasuredPeak, PartlyCachedBelowFourTimesTheCache) {
  const MeasuredPeak peak{20.0, "STREAM-like read", 32 * kMiB};
  EXPECT_TRUE(peak.partly_cached(1.0));
  EXPECT_TRUE(peak.partly_cached(4.0 * 32 * kMiB - 1));
  EXPECT_FALSE(peak.partly_cached(4.0 * 32 * kMiB));
  EXPECT_FALSE(peak.partly_cached(1e12));
  const MeasuredPeak unknown{20.0, "STREAM-like read", 0};  // the OS did not say: no warning
  EXPECT_FALSE(unknown.partly_cached(1.0));
}

TEST(MeasuredPeak, CachedNoteNamesTheCacheTheUnitAndTheColdSize) {
  const MeasuredPeak peak{20.0, "STREAM-like read", 32 * kMiB};
  const std::string step = peak.cached_note("step");
  EXPECT_NE(step.find("a step that reads less than 4x the 32 MiB cache"), std::string::npos)
      << step;
  EXPECT_NE(step.find("memory (128 MiB) finds part"), std::string::npos) << step;
  EXPECT_NE(step.find("from the last step"), std::string::npos) << step;
  const std::string pass = MeasuredPeak{20.0, "copy", 260 * kMiB}.cached_note("pass");
  EXPECT_NE(pass.find("4x the 260 MiB cache"), std::string::npos) << pass;
  EXPECT_NE(pass.find("memory (1.0 GiB) finds"), std::string::npos) << pass;
  EXPECT_EQ(pass.find("step"), std::string::npos) << pass;
}

std::string achieved(const MeasuredPeak& peak, double gbps, double step_bytes) {
  std::ostringstream os;
  print_achieved(peak, gbps, step_bytes, os);
  return os.str();
}

TEST(PrintAchieved, FractionOfThePeakAndTheCacheWarning) {
  const MeasuredPeak peak{25.0, "STREAM-like read", 260 * kMiB};
  const std::string cold = achieved(peak, 20.0, 2e9);
  EXPECT_EQ(cold,
            "  achieved 20.00 GB/s = 80.0 % of the STREAM-like read peak measured now (25.00 "
            "GB/s)\n");
  const std::string warm = achieved(peak, 30.0, 61.1e6);
  EXPECT_EQ(warm.rfind("  achieved 30.00 GB/s = 120.0 % of the STREAM-like read peak", 0), 0)
      << warm;
  EXPECT_NE(warm.find("(this step reads 61.1 MB: " + peak.cached_note("step") + ")\n"),
            std::string::npos)
      << warm;
  EXPECT_EQ(achieved(MeasuredPeak{}, 1.5, 61.1e6), "  achieved 1.50 GB/s\n");
}

TEST(MetricsJson, SaysWhetherAStepIsPartlyCached) {
  RunReport r;
  r.peak = {25.0, "STREAM-like read", 100 * kMiB};
  r.weight_bytes_per_step = 410e6;  // 4x the cache is 419.4e6 bytes
  r.kv_bytes_per_step = 1e6;
  EXPECT_TRUE(metrics_json(r)["step_partly_cached"].get<bool>());
  EXPECT_EQ(metrics_json(r)["cache_note"].get<std::string>(), r.peak.cached_note("step"));
  EXPECT_EQ(metrics_json(r)["peak_cache_bytes"].get<std::size_t>(), 100 * kMiB);
  r.kv_bytes_per_step = 10e6;  // only weights and KV together pass 4x the cache
  EXPECT_FALSE(metrics_json(r)["step_partly_cached"].get<bool>());
  EXPECT_EQ(metrics_json(r)["cache_note"].get<std::string>(), "");
}

}  // namespace
}  // namespace kvheap
