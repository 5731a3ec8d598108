// bench_decode_cpu: the chapter 1 decode step and a prompt's prefill on the CPU, against both
// roofs measured in the same process: the read bandwidth and the fp32 multiply-add rate.
//
// Decode is a bandwidth problem: a step multiplies one token's activations by every weight
// matrix, so it reads all weights once (2 flops per 4 bytes in fp32, per 2 bytes in bf16) plus K
// and V of every cached position. A prefill pass multiplies 128 rows by the same weights: 128
// times the flops for the same bytes, so it is bound by the multiply-adds. Each row of the table
// gives bytes and flops, both rates, and the fraction of the roofline max(bytes / read peak,
// flops / FMA peak) it reached.
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
#include "common/measure/fma_peak.hpp"
#include "common/forward/forward_cpu.hpp"
#include "kernels/matmul.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/serving/report.hpp"
#include "common/model/synthetic_weights.hpp"

namespace kvheap {
namespace {

double g_peak_gbps = 0.0;

/// One line of the summary table printed after the run.
struct Row {
  std::string config;
  double kv_budget_mb, mb_per_step, gflop_per_step, ms_per_step;
  int tokens_per_step;
};
std::vector<Row> g_rows;  // one per benchmark: Google Benchmark reruns a function while it sizes
                          // the iteration count, and only the last, longest run is kept

/// Flops of `rows` consecutive positions first..first + rows - 1 of one sequence, the last of
/// which wants logits: every weight matrix once per row (the classifier for the last row only)
/// and attention over each row's context (q.k and p.v, 2 flops per element of each).
double consecutive_rows_flops(const ModelConfig& c, int first, int rows) {
  double attended = 0;  // positions attended, summed over rows
  for (int i = 0; i < rows; ++i) attended += first + i + 1;
  return pass_flops(c, rows, 1, attended);
}

/// Times `pass` (one forward over `batch`) and records its row of the table.
void time_pass(benchmark::State& state, const ModelConfig& c, DType wt, CpuForward& fwd,
               ch01::ReservedCache& cache, const Batch& batch, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    auto logits = fwd.forward(batch, cache);
    benchmark::DoNotOptimize(logits.data());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double per_step = seconds / static_cast<double>(state.iterations());
  const int rows = batch.size(), first = batch.rows[0].pos;
  // Napkin math: weights read once (params x their size, the embedding table only for its rows
  // unless tied) + K and V of positions 0..first + rows - 1 in every layer, read or written.
  const double weight_bytes = static_cast<double>(weight_bytes_per_decode_step(c, wt));
  const double kv_bytes = static_cast<double>(kv_bytes_for_context(c, DType::F32, first + rows));
  const double bytes = weight_bytes + kv_bytes;
  const double flops = consecutive_rows_flops(c, first, rows);
  state.counters["tokens_per_s"] = rows / per_step;
  state.counters["MB_per_step"] = bytes / 1e6;
  state.counters["GFLOP_per_step"] = flops / 1e9;
  state.counters["KV_budget_MB"] = static_cast<double>(cache.bytes_reserved()) / 1e6;
  state.counters["GBps"] = bytes / per_step / 1e9;
  const bool pairs = wt == DType::BF16 && fwd.bf16_products() == cpu::Bf16Products::kPairs;
  const std::string config = fmt::format("{} {}{}, {}, {} threads", c.name, dtype_name(wt),
                                         pairs ? " pairs" : "", what, omp_get_max_threads());
  state.SetLabel(config);
  const Row row{config,         static_cast<double>(cache.bytes_reserved()) / 1e6,
                bytes / 1e6,    flops / 1e9,
                per_step * 1e3, rows};
  bench::keep_last(g_rows, row);
}

/// Positions 0..tokens - 1 of the sequence in `slot`, with made-up ids; the last row wants logits
/// when `logits` says so.
Batch prompt_rows(const ModelConfig& c, int slot, int tokens, bool logits) {
  Batch b;
  for (int i = 0; i < tokens; ++i)
    b.rows.push_back({(i * 7 + 1) % c.vocab_size, slot, i, logits && i == tokens - 1});
  return b;
}

/// One model prepared for decoding at a fixed context: the cache holds `context` tokens and each
/// iteration decodes position `context` again, so every iteration moves the same bytes.
void decode_step(benchmark::State& state, const ModelWeights& w, int context, DType wt,
                 cpu::Bf16Products bf16 = cpu::Bf16Products::kWiden) {
  ch01::ReservedCache cache(w.config, DType::F32);
  const int slot = cache.admit();
  CpuForward fwd(w, wt, bf16);
  (void)fwd.forward(prompt_rows(w.config, slot, context, false), cache);
  Batch step;
  step.rows.push_back({1, slot, context, true});
  time_pass(state, w.config, wt, fwd, cache, step, fmt::format("decode at ctx {}", context));
}

/// A prompt of `tokens` tokens in one pass, the last row wanting logits; each iteration writes
/// the same positions again.
void prefill(benchmark::State& state, const ModelWeights& w, int tokens, DType wt,
             cpu::Bf16Products bf16 = cpu::Bf16Products::kWiden) {
  ch01::ReservedCache cache(w.config, DType::F32);
  CpuForward fwd(w, wt, bf16);
  const Batch prompt = prompt_rows(w.config, cache.admit(), tokens, true);
  time_pass(state, w.config, wt, fwd, cache, prompt, fmt::format("prefill of {} tokens", tokens));
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

/// The stories110M shape with synthetic weights (440 MB in fp32), made on first use, so that a
/// listing run makes none.
const ModelWeights& stories110m() {
  static const ModelWeights big = make_synthetic_weights(preset("stories110m"), 1);
  return big;
}

}  // namespace
}  // namespace kvheap

int main(int argc, char** argv) {
  using namespace kvheap;
  const bool listing = bench::initialize(argc, argv);

  benchmark::RegisterBenchmark("read_bandwidth", read_bandwidth)
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);

  // A >= 100M-parameter model, its weights in fp32 and in bf16 (and bf16 multiplied in pairs by
  // AVX512-BF16, --bf16-products pairs, where the build has it): a decode step (bound by the read
  // bandwidth) and a 128-token prompt (bound by the multiply-adds).
  struct Weights {
    DType wt;
    cpu::Bf16Products bf16;
    std::string name;
  };
  std::vector<Weights> weights = {{DType::F32, cpu::Bf16Products::kWiden, "fp32"},
                                  {DType::BF16, cpu::Bf16Products::kWiden, "bf16"}};
  if (cpu::bf16_pairs_built())
    weights.push_back({DType::BF16, cpu::Bf16Products::kPairs, "bf16-pairs"});
  for (const Weights& w : weights) {
    benchmark::RegisterBenchmark(
        ("decode_step/stories110m/ctx256/" + w.name).c_str(),
        [w](benchmark::State& s) { decode_step(s, stories110m(), 256, w.wt, w.bf16); })
        ->Unit(benchmark::kMillisecond)
        ->MinTime(2.0);
    benchmark::RegisterBenchmark(
        ("prefill/stories110m/128/" + w.name).c_str(),
        [w](benchmark::State& s) { prefill(s, stories110m(), 128, w.wt, w.bf16); })
        ->Unit(benchmark::kMillisecond)
        ->MinTime(2.0);
  }

  // The real stories260K checkpoint when available (it fits in cache: a latency, not a bandwidth,
  // measurement), else its shape with synthetic weights; also made on the first run.
  benchmark::RegisterBenchmark("decode_step/stories260k/ctx256/fp32",
                               [](benchmark::State& s) {
                                 static const ModelWeights small = stories260k_weights();
                                 decode_step(s, small, 256, DType::F32);
                               })
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(1.0);
  // A listing runs nothing, so it needs no peak: the names are all it prints.
  if (listing) return bench::list_benchmarks();
  const BandwidthSample peak = measure_read_bandwidth();
  g_peak_gbps = peak.gbps;
  double fma_gflops = measure_fma_peak().gflops;
  bench::run_benchmarks();
  if (g_rows.empty()) return 0;  // nothing measured: no table

  // Both peaks again after the runs: the table uses the better of each, so a busy moment at start
  // cannot flatter the fractions.
  g_peak_gbps = std::max(g_peak_gbps, measure_read_bandwidth().gbps);
  fma_gflops = std::max(fma_gflops, measure_fma_peak().gflops);
  fmt::print("\nSTREAM-like read peak: {:.2f} GB/s ({} threads, {:.0f} MiB buffer, LLC {} KiB)\n",
             g_peak_gbps, peak.threads, static_cast<double>(peak.bytes) / (1 << 20),
             last_level_cache_bytes() / 1024);
  fmt::print("fp32 multiply-add peak: {:.1f} GFLOP/s\n", fma_gflops);
  fmt::print("Weight products: fp32 {}; bf16 {}{}\n", cpu::matmul_path(DType::F32),
             cpu::matmul_path(DType::BF16),
             cpu::bf16_pairs_built()
                 ? "; bf16 pairs " + cpu::matmul_path(DType::BF16, cpu::Bf16Products::kPairs)
                 : std::string());
  fmt::print(
      "| config | KV budget MB | MB moved/step | GFLOP/step | ms/step | GB/s | % of read peak | "
      "GFLOP/s | % of FMA peak | % of roofline | tokens/s |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const MeasuredPeak read_peak{g_peak_gbps, "STREAM-like read", last_level_cache_bytes()};
  bool any_cached = false;
  for (const Row& r : g_rows) {
    const bool cached = read_peak.partly_cached(r.mb_per_step * 1e6);
    any_cached = any_cached || cached;
    const double gbps = r.mb_per_step / r.ms_per_step;  // MB per ms = GB/s
    const double gflops = r.gflop_per_step / r.ms_per_step * 1e3;
    const double roof_ms =
        std::max(r.mb_per_step / g_peak_gbps, r.gflop_per_step / fma_gflops * 1e3);
    fmt::print(
        "| {} | {:.2f} | {:.2f} | {:.3f} | {:.3f} | {:.2f} | {:.1f}{} | {:.1f} | {:.1f} | {:.1f}{} "
        "| {:.1f} |\n",
        r.config, r.kv_budget_mb, r.mb_per_step, r.gflop_per_step, r.ms_per_step, gbps,
        100.0 * gbps / g_peak_gbps, cached ? "*" : "", gflops, 100.0 * gflops / fma_gflops,
        100.0 * roof_ms / r.ms_per_step, cached ? "*" : "",
        1e3 * r.tokens_per_step / r.ms_per_step);
  }
  if (any_cached) fmt::print("\n* {}\n", read_peak.cached_note("step"));
  if (cpu::bf16_pairs_built())
    fmt::print(
        "\nbf16 pairs: the FMA peak is the fp32 one; vdpbf16ps does two products a lane per "
        "instruction, so these rows can pass 100 % of it.\n");
  return 0;
}
