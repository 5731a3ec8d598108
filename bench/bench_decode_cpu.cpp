// bench_decode_cpu: the chapter 1 decode step on the CPU, against the read bandwidth measured in
// the same process.
//
// Decode is a bandwidth problem: a step multiplies one token's activations by every weight
// matrix, so it reads all weights once (2 flops per 4 bytes in fp32) plus K and V of every cached
// position. tokens/s x bytes/step = achieved GB/s, which the table compares with a STREAM-like
// read of a buffer 8x the last-level cache.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/support/command.hpp"
#include "bench/support/rows.hpp"
#include "chapters/01_cpu_reference/reserved_cache.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/forward/forward_cpu.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/serving/report.hpp"
#include "common/model/synthetic_weights.hpp"

namespace kvheap {
namespace {

double g_peak_gbps = 0.0;

/// One line of the summary table printed after the run.
struct Row {
  std::string config;
  double kv_budget_mb, mb_per_step, ms_per_step, gbps;
};
std::vector<Row> g_rows;  // one per benchmark: Google Benchmark reruns a function while it sizes
                          // the iteration count, and only the last, longest run is kept

/// One model prepared for decoding at a fixed context: the cache holds `context` tokens and each
/// iteration decodes position `context` again, so every iteration moves the same bytes.
void decode_step(benchmark::State& state, const ModelWeights& w, int context) {
  const ModelConfig& c = w.config;
  ch01::ReservedCache cache(c, DType::F32);
  const int slot = cache.admit();
  CpuForward fwd(w);
  Batch prompt;
  for (int i = 0; i < context; ++i)
    prompt.rows.push_back({(i * 7 + 1) % c.vocab_size, slot, i, false});
  (void)fwd.forward(prompt, cache);
  Batch step;
  step.rows.push_back({1, slot, context, true});
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    auto logits = fwd.forward(step, cache);
    benchmark::DoNotOptimize(logits.data());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double per_step = seconds / static_cast<double>(state.iterations());
  // Napkin math: weights read once (params x 4 B, the embedding table only for its one row unless
  // tied) + K and V of positions 0..context in every layer.
  const double weight_bytes = static_cast<double>(weight_bytes_per_decode_step(c, DType::F32));
  const double kv_bytes = static_cast<double>(kv_bytes_for_context(c, DType::F32, context + 1));
  const double bytes = weight_bytes + kv_bytes;
  const double gbps = bytes / per_step / 1e9;
  state.counters["tokens_per_s"] = 1.0 / per_step;
  state.counters["MB_per_step"] = bytes / 1e6;
  state.counters["KV_budget_MB"] = static_cast<double>(cache.bytes_reserved()) / 1e6;
  state.counters["GBps"] = gbps;
  state.counters["frac_of_peak"] = gbps / g_peak_gbps;
  const std::string config =
      fmt::format("{} fp32, ctx {}, {} threads", c.name, context, omp_get_max_threads());
  state.SetLabel(config);
  const Row row{config, static_cast<double>(cache.bytes_reserved()) / 1e6, bytes / 1e6,
                per_step * 1e3, gbps};
  bench::keep_last(g_rows, row);
}

void read_bandwidth(benchmark::State& state) {
  BandwidthSample s;
  for (auto _ : state) s = measure_read_bandwidth(0, 3);
  state.counters["GB/s"] = s.gbps;
  state.counters["MB"] = static_cast<double>(s.bytes) / 1e6;
  state.SetLabel(fmt::format("STREAM-like read, {} threads", s.threads));
}

/// stories260K from $KVHEAP_MODELS_DIR when it is there, else its shape with synthetic weights.
ModelWeights stories260k_weights() {
  const char* dir = std::getenv("KVHEAP_MODELS_DIR");
  const std::string path = dir ? std::string(dir) + "/stories260K.bin" : "";
  return (!path.empty() && std::filesystem::exists(path))
             ? load_llama2c(path)
             : make_synthetic_weights(preset("stories260k"), 1);
}

}  // namespace
}  // namespace kvheap

int main(int argc, char** argv) {
  using namespace kvheap;
  const bool listing = bench::initialize(argc, argv);

  benchmark::RegisterBenchmark("read_bandwidth", read_bandwidth)
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);

  // A >= 100M-parameter model: the stories110M shape with synthetic weights (440 MB in fp32),
  // made on the first run, so that a listing run makes none.
  benchmark::RegisterBenchmark("decode_step/stories110m/ctx256",
                               [](benchmark::State& s) {
                                 static const ModelWeights big =
                                     make_synthetic_weights(preset("stories110m"), 1);
                                 decode_step(s, big, 256);
                               })
      ->Unit(benchmark::kMillisecond)
      ->MinTime(2.0);

  // The real stories260K checkpoint when available (it fits in cache: a latency, not a bandwidth,
  // measurement), else its shape with synthetic weights; also made on the first run.
  benchmark::RegisterBenchmark("decode_step/stories260k/ctx256",
                               [](benchmark::State& s) {
                                 static const ModelWeights small = stories260k_weights();
                                 decode_step(s, small, 256);
                               })
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(1.0);
  // A listing runs nothing, so it needs no peak: the names are all it prints.
  if (listing) return bench::list_benchmarks();
  const BandwidthSample peak = measure_read_bandwidth();
  g_peak_gbps = peak.gbps;
  bench::run_benchmarks();
  if (g_rows.empty()) return 0;  // nothing measured: no table

  // The peak again after the runs: the table uses the better of the two, so a busy moment at
  // start cannot flatter the fraction.
  g_peak_gbps = std::max(g_peak_gbps, measure_read_bandwidth().gbps);
  fmt::print("\nSTREAM-like read peak: {:.2f} GB/s ({} threads, {:.0f} MiB buffer, LLC {} KiB)\n",
             g_peak_gbps, peak.threads, static_cast<double>(peak.bytes) / (1 << 20),
             last_level_cache_bytes() / 1024);
  fmt::print(
      "| config | KV budget MB | MB moved/step | ms/step | GB/s | % of read peak | tokens/s |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|\n");
  const MeasuredPeak read_peak{g_peak_gbps, "STREAM-like read", last_level_cache_bytes()};
  bool any_cached = false;
  for (const Row& r : g_rows) {
    const bool cached = read_peak.partly_cached(r.mb_per_step * 1e6);
    any_cached = any_cached || cached;
    fmt::print("| {} | {:.2f} | {:.2f} | {:.3f} | {:.2f} | {:.1f}{} | {:.1f} |\n", r.config,
               r.kv_budget_mb, r.mb_per_step, r.ms_per_step, r.gbps, 100.0 * r.gbps / g_peak_gbps,
               cached ? "*" : "", 1e3 / r.ms_per_step);
  }
  if (any_cached) fmt::print("\n* {}\n", read_peak.cached_note("step"));
  return 0;
}
