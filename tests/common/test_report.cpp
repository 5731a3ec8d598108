// What a chapter's program says about its bandwidth: the fraction of the measured peak, and the
// warning that a step small enough to stay in the cache in front of that memory measures the
// cache (a 61 MB model on a CPU with a 260 MiB L3 reached 119 % of the read peak).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>

#include "common/measure/bandwidth.hpp"
#include "common/serving/report.hpp"

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

// A row multiplies by every weight of every matrix once, 2 FLOPs a weight; the embedding gather
// and the norms multiply nothing. Counted by hand for a model with grouped-query attention and
// an untied classifier, where each of those rules matters.
TEST(MatmulFlops, TwoPerMatrixWeightClassifierIncludedGatherAndNormsNot) {
  ModelConfig c;
  c.dim = 64;
  c.hidden_dim = 160;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 100;
  c.max_seq_len = 32;
  c.tied_embeddings = false;
  const double per_layer = 64.0 * 64 + 2 * 64.0 * 32 + 64.0 * 64 + 3 * 64.0 * 160;  // q k v o, ffn
  EXPECT_DOUBLE_EQ(matmul_flops_per_row(c), 2 * (3 * per_layer + 100.0 * 64));
  c.tied_embeddings = true;  // the table is the classifier now: still one product
  EXPECT_DOUBLE_EQ(matmul_flops_per_row(c), 2 * (3 * per_layer + 100.0 * 64));
}

TEST(PrintAchieved, MatmulRateAgainstTheMultiplyAddPeakWhenOneWasMeasured) {
  MeasuredPeak peak{25.0, "STREAM-like read", 0};
  std::ostringstream os;
  print_achieved(peak, 20.0, 2e9, os, 30.0);
  EXPECT_NE(os.str().find("\n  matmul  : 30.0 GFLOP/s over every pass\n"), std::string::npos)
      << os.str();
  peak.gflops = 120.0;
  os.str("");
  print_achieved(peak, 20.0, 2e9, os, 30.0);
  EXPECT_NE(os.str().find("  matmul  : 30.0 GFLOP/s over every pass = 25.0 % of the fp32 "
                          "multiply-add peak measured now (120.0 GFLOP/s)\n"),
            std::string::npos)
      << os.str();
}

TEST(ServingJson, MatmulRateOverEveryRowOfEveryPass) {
  RunReport r;
  r.matmul_flops_per_row = 3e7;
  r.prefill_rows = 300;
  r.decode_rows = 700;
  r.prefill_seconds = 0.1;
  r.decode_seconds = 0.4;  // chapters 1-4: prefill and decode passes together are 0.5 s
  r.peak.gflops = 120.0;
  EXPECT_DOUBLE_EQ(serving_json(r)["matmul_gflops"].get<double>(), 60.0);
  EXPECT_DOUBLE_EQ(serving_json(r)["fraction_of_fma_peak"].get<double>(), 0.5);
  r.whole_run = true;  // a continuous batcher's decode time already counts every pass
  EXPECT_DOUBLE_EQ(serving_json(r)["matmul_gflops"].get<double>(), 75.0);
}

// Each pass at the larger of its two times: bytes at the read peak, flops at the FMA peak. Here
// a step reads 1 GB (0.1 s at 10 GB/s) and a row does 1 GFLOP (0.01 s at 100 GFLOP/s), so
// passes of up to 10 rows are bound by bytes.
TEST(ServingJson, RooflineTakesTheLargerTimeOfEachPass) {
  RunReport r;
  r.weight_bytes_per_step = 0.9e9;
  r.kv_bytes_per_step = 0.1e9;
  r.matmul_flops_per_row = 1e9;
  r.pass_rows = {64, 10, 4, 1};
  r.passes = 4;
  r.prefill_seconds = 0.2;
  r.decode_seconds = 0.8;
  EXPECT_EQ(r.roofline_seconds(), 0.0) << "no peaks measured: no roofline";
  r.peak.gbps = 10.0;
  r.peak.gflops = 100.0;
  EXPECT_NEAR(r.roofline_seconds(), 0.64 + 0.1 + 0.1 + 0.1, 1e-12);
  EXPECT_EQ(r.passes_bound_by_bytes(), 3);
  const nlohmann::json s = serving_json(r);
  EXPECT_NEAR(s["fraction_of_roofline"].get<double>(), 0.94, 1e-12);
  EXPECT_EQ(s["passes_bound_by_bytes"].get<long>(), 3);
}

}  // namespace
}  // namespace kvheap
