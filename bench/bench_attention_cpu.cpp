// bench_attention_cpu: the CPU twin of decode attention (cpu::attend_batch over a contiguous
// cache), against a STREAM-like read bandwidth measured in the same process. Builds and runs in
// every mode, KVHEAP_CUDA=off included; the GPU kernel's benchmark is bench_attention_gpu.
//
// The work is chapter 1's attention: OpenMP over chunks of up to 2048 positions of each batch row
// (split into KV-head ranges when the chunks alone would leave a thread idle or over 1.25x its
// share: cpu::head_ranges),
// each KV head's rows read once for its whole query group. Heads are Llama-3-8B's (32 query, 8 KV,
// head_dim 128) and, for a model with one query head per KV head, stories110m's (12 of 64), one
// layer. Cold-cache numbers: only configurations whose K+V working set is at least 4x the
// last-level cache run (and at most 1 GiB, to share the machine, or twice that floor where the LLC
// is larger than 128 MiB: bench/support/cpu_caches.hpp); every slot reserves 32k positions
// (stories110m's: its 1024-position limit) so sequences sit far apart, and rows use slots in
// shuffled order. The kernel runs
// in rounds between passes of the read probe, and each round is compared with the probe of the same
// moment (see attention_cpu), because this kind of machine's bandwidth drifts while a benchmark
// runs. Each round is also followed by the same kernel on a working set that stays in cache, which
// measures the ceiling its arithmetic sets on the same cores at the same moment: a kernel below the
// probe but at that ceiling is bound by compute, not by how it reads memory.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/support/command.hpp"
#include "bench/support/cpu_caches.hpp"
#include "bench/support/rows.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/measure/fma_peak.hpp"
#include "common/util/host_buffer.hpp"
#include "common/model/model_config.hpp"
#include "kernels/decode_attention_cpu.hpp"

namespace kvheap {
namespace {

/// The models whose heads the configurations take: Llama-3-8B's (32 query heads, 8 KV heads of 128:
/// grouped queries) and stories110m's (12 heads of 64, one query head per KV head).
const ModelConfig& llama() {
  static const ModelConfig c = preset("llama-3-8b");
  return c;
}
const ModelConfig& stories() {
  static const ModelConfig c = preset("stories110m");
  return c;
}

double g_peak_gbps = 0.0;  // the best read bandwidth any probe of this run saw

struct Row {
  std::string config;
  double budget_mb, mb_moved, ms, gbps;
  double peak_gbps;       // median of the read probes around the kernel's rounds
  double frac_of_peak;    // median over the rounds of (kernel GB/s / probe around the round)
  double in_cache_gbps;   // median of the in-cache rounds: the kernel's compute ceiling
  double frac_of_bound;   // median over the rounds of (kernel GB/s / min(probe, in-cache))
  double flops_per_byte;  // multiply-add work per byte of cache read (2 flops per multiply-add)
};
std::vector<Row> g_rows;

// Paired rounds: kRounds timings of about kRoundSeconds each, between probe passes.
constexpr int kRounds = 11;
constexpr double kRoundSeconds = 0.03;
std::unique_ptr<ReadProbe> g_probe;  // one buffer for every probe pass of the run

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// One benchmark case: a batch of sequences of `heads`' shape in a contiguous cache, each reserving
/// `max_seq_len` positions, allocated as chapter 1's reservations are (zero-filled, on huge pages)
/// and visited in a shuffled slot order.
template <class T>
class Case {
 public:
  Case(const ModelConfig& heads, int batch, int ctx, long max_seq_len)
      : heads_(heads),
        kv_dim_(heads.kv_dim()),
        batch_(batch),
        ctx_(ctx),
        max_seq_len_(max_seq_len),
        k_buf_(static_cast<std::size_t>(batch) * max_seq_len * kv_dim_ * sizeof(T)),
        v_buf_(k_buf_.size()),
        slots_(batch),
        q_(static_cast<std::size_t>(batch) * heads.q_dim(), 0.05f),
        out_(q_.size()) {
    if (ctx > max_seq_len)
      throw std::invalid_argument(fmt::format(
          "{} positions per sequence do not fit its reservation of {}", ctx, max_seq_len));
    T* k = k_buf_.as<T>();
    T* v = v_buf_.as<T>();
    std::iota(slots_.begin(), slots_.end(), 0);
    std::shuffle(slots_.begin(), slots_.end(), std::mt19937(42));
#pragma omp parallel for schedule(static)
    for (long r = 0; r < static_cast<long>(batch) * ctx; ++r) {
      const long row = (r / ctx) * max_seq_len + r % ctx;
      for (long e = 0; e < kv_dim_; ++e) {
        const float x = static_cast<float>((row * 31 + e) % 17) * 0.01f - 0.08f;
        cpu::from_float(x, k[row * kv_dim_ + e]);
        cpu::from_float(-x, v[row * kv_dim_ + e]);
      }
    }
    run();  // warm-up: page in the scratch vectors
  }

  /// One call of the twin over the whole batch.
  void run() {
    const T* k = k_buf_.as<T>();
    const T* v = v_buf_.as<T>();
    cpu::attend_batch<T>(
        cpu::AttendShape{heads_.n_kv_heads, heads_.group_size(), heads_.head_dim}, batch_,
        [&](int i) {
          const long base = slots_[i] * max_seq_len_ * kv_dim_;
          return cpu::ContiguousRows<T>{k + base, v + base, kv_dim_};
        },
        [&](int) { return ctx_; }, q_.data(), out_.data());
    benchmark::DoNotOptimize(out_.data());
  }
  /// Calls that take about `seconds` together, at least one.
  int calls_for(double seconds) { return std::max(1, static_cast<int>(seconds / seconds_of(1))); }
  /// Wall seconds of `calls` calls.
  double seconds_of(int calls) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  /// Napkin bytes of one call: batch * ctx * 2 (K and V) * n_kv_heads * head_dim * bytes of
  /// cache, plus q and out in fp32 (negligible next to the cache).
  double bytes() const {
    return static_cast<double>(batch_) * ctx_ * 2.0 * kv_dim_ * static_cast<double>(sizeof(T)) +
           2.0 * static_cast<double>(q_.size()) * sizeof(float);
  }
  /// Bytes reserved for K and V.
  double reserved_bytes() const { return 2.0 * static_cast<double>(k_buf_.size()); }

 private:
  const ModelConfig& heads_;
  long kv_dim_;
  int batch_, ctx_;
  long max_seq_len_;
  HostBuffer k_buf_, v_buf_;
  std::vector<int> slots_;
  std::vector<float> q_, out_;
};

// The compute ceiling: the same kernel and threads on a working set that stays in L2, one
// sequence per thread, all of them together filling half of one core's L2 (with two threads and
// a 1 MiB L2: 64 bf16 positions of Llama-3-8B's heads each, 32 fp32 ones). attend_batch hands
// sequences to threads dynamically, so a thread may take another's sequence on the next call;
// with the whole set in every core's L2 that costs nothing. What it streams is what the
// arithmetic allows, whatever the memory does. The L3 would not do: on a shared host other
// tenants' cores evict it.
std::size_t g_l2_bytes = std::size_t{1} << 20;  // per core, set in main from the CPU's report

template <class T>
int in_cache_ctx(const ModelConfig& m) {
  const std::size_t per_position = 2 * static_cast<std::size_t>(m.kv_dim()) * sizeof(T);
  const auto threads = static_cast<std::size_t>(omp_get_max_threads());
  return static_cast<int>(std::max<std::size_t>(16, g_l2_bytes / 2 / threads / per_position));
}

template <class T>
void attention_cpu(benchmark::State& state, const ModelConfig& m, const char* dtype, int batch,
                   int ctx, long reserve) {
  Case<T> cold(m, batch, ctx, reserve);
  Case<T> hot(m, omp_get_max_threads(), in_cache_ctx<T>(m), in_cache_ctx<T>(m));
  // The machine's read bandwidth drifts by tens of percent over seconds on shared hosts, and its
  // cores' speed by less, so the kernel is timed in rounds between passes of the read probe,
  // each round compared with the mean of the passes on either side of it: both sides are single
  // timings of the same moment. A shorter in-cache round follows each, for the compute ceiling of
  // the moment. The medians over the rounds are reported. A probe pass is two reads of the probe's
  // buffer (one and four streams per thread), so on a machine with a large LLC it lasts longer
  // than a round (a 2 GiB probe about 170 ms at 24 GB/s): the probes still bracket each round
  // within a fraction of a second.
  const int calls = cold.calls_for(kRoundSeconds), hot_calls = hot.calls_for(kRoundSeconds / 3);
  const double bytes = cold.bytes();
  std::vector<double> per_call, probes, in_cache, ratios, bound_ratios;
  for (auto _ : state) {
    double before = g_probe->pass();
    for (int r = 0; r < kRounds; ++r) {
      const double s = cold.seconds_of(calls) / calls;
      const double ceiling = hot.bytes() * hot_calls / hot.seconds_of(hot_calls) / 1e9;
      const double after = g_probe->pass();
      const double probe = 0.5 * (before + after);
      g_peak_gbps = std::max({g_peak_gbps, before, after});
      per_call.push_back(s);
      probes.push_back(probe);
      in_cache.push_back(ceiling);
      ratios.push_back(bytes / s / 1e9 / probe);
      bound_ratios.push_back(bytes / s / 1e9 / std::min(probe, ceiling));
      before = after;
    }
  }
  const double s = median(per_call);
  const double gbps = bytes / s / 1e9;
  state.counters["GBps"] = gbps;
  state.counters["frac_of_read_peak"] = median(ratios);
  const std::string config = fmt::format("{}, batch {}, ctx {}, {}, {} threads", m.name, batch, ctx,
                                         dtype, omp_get_max_threads());
  state.SetLabel(config);
  // Arithmetic: one multiply-add per query head and element of K (the scores) and of V (the
  // weighted sum), i.e. 2 x 2 x n_heads x head_dim flops per position.
  const double flops = 4.0 * batch * ctx * m.q_dim();
  bench::keep_last(
      g_rows, Row{config, cold.reserved_bytes() / 1e6, bytes / 1e6, s * 1e3, gbps, median(probes),
                  median(ratios), median(in_cache), median(bound_ratios), flops / bytes});
}

}  // namespace
}  // namespace kvheap

int main(int argc, char** argv) {
  using namespace kvheap;
  const bool listing = bench::initialize(argc, argv);
  const std::size_t llc = bench::llc_bytes();
  g_l2_bytes = bench::l2_bytes_per_core(g_l2_bytes);
  const ColdSetWindow window = bench::cold_set_window(std::size_t{1} << 30);

  benchmark::RegisterBenchmark("read_bandwidth",
                               [](benchmark::State& s) {
                                 double best = 0.0;
                                 for (auto _ : s)
                                   for (int r = 0; r < 3; ++r)
                                     best = std::max(best, g_probe->pass());
                                 s.counters["GBps"] = best;
                               })
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
  // (model, batch, context, positions each sequence reserves): Llama-3-8B's grouped heads at
  // long contexts, 32k positions apart as chapter 1 would reserve them for a long-context model
  // (its preset's 8192 is below the contexts timed), and stories110m's one query head per KV head
  // at its 1024-position limit, in batches large enough for a cold working set. The odd batches
  // (17, 33) are items of one chunk each that no even share between two threads can take whole.
  struct Config {
    const ModelConfig* model;
    const char* tag;
    int batch, ctx;
    long reserve;
  };
  std::vector<Config> configs;
  for (int batch : {1, 8, 16})
    for (int ctx : {4096, 16384, 32768})
      configs.push_back({&llama(), "llama3_8b", batch, ctx, 32768});
  configs.push_back({&llama(), "llama3_8b", 17, 2048, 32768});
  for (int batch : {32, 33, 64})
    configs.push_back({&stories(), "stories110m", batch, 1024, stories().max_seq_len});
  for (int bf16 : {0, 1}) {
    for (const Config& c : configs) {
      const std::size_t elem = bf16 ? 2 : 4;
      const auto kv_dim = static_cast<std::size_t>(c.model->kv_dim());
      const std::size_t set = static_cast<std::size_t>(c.batch) * c.ctx * 2 * kv_dim * elem;
      const std::string name = fmt::format("attend_batch/{}_{}/batch{}/ctx{}", c.tag,
                                           bf16 ? "bf16" : "fp32", c.batch, c.ctx);
      const std::size_t reserved =
          static_cast<std::size_t>(c.batch) * c.reserve * 2 * kv_dim * elem;
      if (!window.admits(name, set, reserved)) continue;
      auto fn = [bf16, c](benchmark::State& s) {
        if (bf16) {
          attention_cpu<cpu::BF16Bits>(s, *c.model, "bf16", c.batch, c.ctx, c.reserve);
        } else {
          attention_cpu<float>(s, *c.model, "fp32", c.batch, c.ctx, c.reserve);
        }
      };
      benchmark::RegisterBenchmark(name.c_str(), fn)->Unit(benchmark::kMillisecond)->Iterations(1);
    }
  }
  // A listing runs nothing, so it needs no peak: the names are all it prints.
  if (listing) return bench::list_benchmarks();
  g_probe = std::make_unique<ReadProbe>();
  for (int r = 0; r < 5; ++r) g_peak_gbps = std::max(g_peak_gbps, g_probe->pass());
  const FmaSample fma = measure_fma_peak();
  bench::run_benchmarks();
  if (g_rows.empty()) return 0;  // nothing measured: no table

  // The peak again after the runs. The table compares each configuration with the probe passes
  // around its rounds, and also with the best pass of the whole run, the stricter reference.
  for (int r = 0; r < 5; ++r) g_peak_gbps = std::max(g_peak_gbps, g_probe->pass());
  const double fma_gflops = std::max(fma.gflops, measure_fma_peak().gflops);
  double low = g_peak_gbps;
  for (const Row& r : g_rows) low = std::min(low, r.peak_gbps);
  fmt::print(
      "\nSTREAM-like read peak: {:.2f} GB/s at best, {:.2f} at worst over the configurations' "
      "medians ({} threads, {:.0f} MiB buffer, LLC {} KiB)\n",
      g_peak_gbps, low, omp_get_max_threads(), static_cast<double>(g_probe->bytes()) / (1 << 20),
      llc / 1024);
  fmt::print(
      "Each configuration: {} rounds of about {:.0f} ms between read-probe passes; GB/s and the "
      "probe are medians over the rounds, % of probe the median of the per-round ratios\n",
      kRounds, kRoundSeconds * 1e3);
  fmt::print(
      "fp32 multiply-add peak: {:.1f} GFLOP/s ({} threads): machine balance {:.2f} flop/byte\n",
      fma_gflops, fma.threads, fma_gflops / g_peak_gbps);
  fmt::print(
      "In-cache: the same kernel and threads over one sequence per thread, together half of a "
      "core's {} KiB L2 ({} fp32 or {} bf16 positions each of Llama-3-8B's heads, {} or {} of "
      "stories110m's), in a shorter round after each configuration's round: the rate its "
      "arithmetic allows at that moment. % of bound compares each round with min(probe, "
      "in-cache)\n",
      g_l2_bytes / 1024, in_cache_ctx<float>(llama()), in_cache_ctx<cpu::BF16Bits>(llama()),
      in_cache_ctx<float>(stories()), in_cache_ctx<cpu::BF16Bits>(stories()));
  fmt::print(
      "| config | KV budget MB (reserved) | MB moved | ms/call | GB/s | read probe around, GB/s | "
      "% of probe | % of best probe | in-cache GB/s | % of bound | flop/byte | % of FMA peak |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : g_rows) {
    fmt::print(
        "| {} | {:.0f} | {:.1f} | {:.2f} | {:.2f} | {:.2f} | {:.1f} | {:.1f} | {:.2f} | {:.1f} | "
        "{:.1f} | {:.1f} |\n",
        r.config, r.budget_mb, r.mb_moved, r.ms, r.gbps, r.peak_gbps, 100.0 * r.frac_of_peak,
        100.0 * r.gbps / g_peak_gbps, r.in_cache_gbps, 100.0 * r.frac_of_bound, r.flops_per_byte,
        100.0 * r.gbps * r.flops_per_byte / fma_gflops);
  }
  return 0;
}
