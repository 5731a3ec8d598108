// bench_shared_prefix_cpu: what reading a shared prefix once buys the CPU twin of decode attention.
//
// A decode step of `groups` prompts of `prefix` positions, each forked into `samples` sequences
// that have generated `own` positions of their own, laid out by chapter 4's allocator
// (ch04::SharedBlockManager: a shuffled pool, forks sharing every prompt block). The same step is
// timed two ways over the same pool: every row reading its whole context (cpu::attend_batch, as
// chapter 3 does) and each group reading its prefix once for all its rows
// (cpu::attend_batch_shared_prefix). Both must agree within 1e-5 relative before anything is
// timed.
//
// Napkin math: plain attention reads sum(n_ctx) x 2 x kv_dim x 2 B (bf16) per layer; read-once
// attention reads each prefix once, groups x prefix + rows x own positions. The KV actually
// stored is the latter too. GB/s is each variant's own bytes over its own time, against the
// STREAM-like read peak measured in the same process. Heads are Llama-3-8B's (32 query, 8 KV,
// head_dim 128), one layer, block size 16. Timing is as in bench_paged_attention_cpu: alternating
// pairs, best of each.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "bench/support/command.hpp"
#include "bench/support/cpu_caches.hpp"
#include "bench/support/failures.hpp"
#include "bench/support/rows.hpp"
#include "bench/support/shared_prefix_step.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/util/host_buffer.hpp"
#include "common/model/model_config.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/shared_prefix_attention_cpu.hpp"

namespace kvheap {
namespace {

using T = cpu::BF16Bits;
using bench::kOwnPositions;
using bench::kSharedBlockSize;

const ModelConfig& heads() {
  static const ModelConfig c = preset("llama-3-8b");  // 32 query heads, 8 KV heads, head_dim 128
  return c;
}
long kv_dim() { return heads().kv_dim(); }
cpu::AttendShape shape() { return {heads().n_kv_heads, heads().group_size(), heads().head_dim}; }
double row_bytes() { return 2.0 * static_cast<double>(kv_dim()) * sizeof(T); }

/// The step, its pool in host memory and its queries.
struct Step : bench::SharedPrefixStep {
  HostBuffer k, v;       // [num_blocks * block_size, kv_dim]
  std::vector<float> q;  // [rows, q_dim]

  [[nodiscard]] auto rows_of() const {
    return [this](int i) {
      const KVView& p = batch.view;
      return cpu::PagedRows<T>{k.as<T>(), v.as<T>(), p.indices.data() + p.indptr[p.row_seq[i]],
                               kSharedBlockSize, kv_dim()};
    };
  }
  [[nodiscard]] auto n_ctx_of() const {
    return [this](int i) { return batch.view.n_ctx[i]; };
  }
};

Step make_step(int groups, int samples, int prefix) {
  Step s;
  static_cast<bench::SharedPrefixStep&>(s) =
      bench::make_shared_prefix_step(groups, samples, prefix);
  const std::size_t elems = static_cast<std::size_t>(s.num_blocks()) * kSharedBlockSize * kv_dim();
  s.k = HostBuffer(elems * sizeof(T));
  s.v = HostBuffer(elems * sizeof(T));
  T* kp = s.k.as<T>();
  T* vp = s.v.as<T>();
#pragma omp parallel for schedule(static)
  for (std::size_t e = 0; e < elems; ++e) {
    cpu::from_float(static_cast<float>(e % 17) * 0.01f - 0.08f, kp[e]);
    cpu::from_float(static_cast<float>(e % 13) * -0.01f + 0.06f, vp[e]);
  }
  s.q.resize(static_cast<std::size_t>(s.rows()) * heads().q_dim());
  for (std::size_t j = 0; j < s.q.size(); ++j) s.q[j] = 0.02f * static_cast<float>(j % 11) - 0.1f;
  return s;
}

void attend_plain(const Step& s, float* out) {
  cpu::attend_batch<T>(shape(), s.rows(), s.rows_of(), s.n_ctx_of(), s.q.data(), out);
}
void attend_read_once(const Step& s, float* out) {
  cpu::attend_batch_shared_prefix<T>(shape(), s.rows(), s.rows_of(), s.n_ctx_of(),
                                     s.batch.view.prefixes, s.q.data(), out);
}

struct Row {
  std::string config;
  double stored_mb, plain_mb, once_mb, plain_ms, once_ms;
};
std::vector<Row> g_rows;
double g_peak_gbps = 0.0;

void shared_prefix(benchmark::State& state, int groups, int samples, int prefix) {
  static std::unique_ptr<Step> kept;  // Google Benchmark calls this more than once per config
  if (!kept || kept->groups != groups || kept->samples != samples || kept->prefix != prefix) {
    kept.reset();
    kept = std::make_unique<Step>(make_step(groups, samples, prefix));
  }
  const Step& s = *kept;
  std::vector<float> plain(s.q.size()), once(s.q.size());
  attend_plain(s, plain.data());
  attend_read_once(s, once.data());
  double worst = 0.0, scale = 0.0;
  for (std::size_t j = 0; j < plain.size(); ++j) {
    worst = std::max(worst, static_cast<double>(std::fabs(plain[j] - once[j])));
    scale = std::max(scale, static_cast<double>(std::fabs(plain[j])));
  }
  if (worst > 1e-5 * scale) {
    bench::fail(state, fmt::format("read-once output differs from plain by {:.3g} relative",
                                   worst / scale));
    return;
  }
  auto timed = [](auto&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> tp, to;
  long pair = 0;
  for (auto _ : state) {
    const bool once_first = pair++ % 2 == 1;
    if (once_first) to.push_back(timed([&] { attend_read_once(s, once.data()); }));
    tp.push_back(timed([&] { attend_plain(s, plain.data()); }));
    if (!once_first) to.push_back(timed([&] { attend_read_once(s, once.data()); }));
    benchmark::DoNotOptimize(once.data());
    state.SetIterationTime((tp.back() + to.back()) * 1e-3);
  }
  const double p_ms = *std::min_element(tp.begin(), tp.end());
  const double o_ms = *std::min_element(to.begin(), to.end());
  state.counters["speedup"] = p_ms / o_ms;
  const std::string config = fmt::format("{} prompts x {} samples, prefix {}, own {}", groups,
                                         samples, prefix, kOwnPositions);
  const double stored = static_cast<double>(s.blocks->slots_stored()) * row_bytes() / 1e6;
  const Row r{config, stored, s.bytes(false, row_bytes()) / 1e6, s.bytes(true, row_bytes()) / 1e6,
              p_ms,   o_ms};
  bench::keep_last(g_rows, r);
}

}  // namespace
}  // namespace kvheap

int main(int argc, char** argv) {
  using namespace kvheap;
  const bool listing = bench::initialize(argc, argv);
  for (int samples : {1, 2, 4, 8, 16}) {
    const int groups = 4, prefix = 8192;
    const std::string name =
        fmt::format("shared_prefix/bf16/prompts{}/samples{}/prefix{}", groups, samples, prefix);
    benchmark::RegisterBenchmark(
        name.c_str(), [=](benchmark::State& s) { shared_prefix(s, groups, samples, prefix); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(1.0);
  }
  // A listing runs nothing, so it needs no peak: the names are all it prints.
  if (listing) return bench::list_benchmarks();
  g_peak_gbps = measure_read_bandwidth().gbps;
  bench::run_benchmarks();
  if (g_rows.empty()) return bench::exit_status("bench_shared_prefix_cpu");
  g_peak_gbps = std::max(g_peak_gbps, measure_read_bandwidth().gbps);
  fmt::print(
      "\nShared-prefix attention, CPU twin, one layer, bf16, block size 16, {} threads. "
      "STREAM-like read peak: {:.2f} GB/s; LLC {} KiB.\n\n"
      "| config | KV stored MB | plain reads MB | read-once reads MB | plain ms | read-once ms | "
      "speedup | plain GB/s | read-once GB/s | read-once % of peak |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      omp_get_max_threads(), g_peak_gbps, bench::llc_bytes() / 1024);
  for (const Row& r : g_rows) {
    const double once_gbps = r.once_mb / r.once_ms;  // MB per ms = GB/s
    fmt::print(
        "| {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.1f} |\n",
        r.config, r.stored_mb, r.plain_mb, r.once_mb, r.plain_ms, r.once_ms, r.plain_ms / r.once_ms,
        r.plain_mb / r.plain_ms, once_gbps, 100.0 * once_gbps / g_peak_gbps);
  }
  return bench::exit_status("bench_shared_prefix_cpu");
}
