// bench_prefill_attention_cpu: the attention of a prompt chunk on the CPU, its rows one at a time
// against attend_batch's runs, which read each tile of the cache once for all the rows it is
// whole for (cpu::attend_span_rows).
//
// A chunk of n rows appended to a sequence that already holds `before` positions: row i attends
// causally to before + i + 1 positions, so the chunk does 4 x n_heads x head_dim flops per
// position a row attends to (a multiply-add each for the scores and for the weighted sum of V),
// and reads the before + n cached positions of every KV head at least once. Both ways give every
// row bitwise the same result (the program checks it, and stops if not); only the time differs.
// The cache stays where the CPU's caches keep it between repeats, as it does while a prompt is
// prefilled, so the rates are arithmetic's: the table gives both peaks, measured in this run, and
// each time's fraction of the roofline max(bytes / read peak, flops / FMA peak).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench/support/plain_options.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/model/model_config.hpp"
#include "common/program/cli.hpp"
#include "common/program/options.hpp"
#include "kernels/decode_attention_cpu.hpp"

namespace kvheap {
namespace {

/// Best seconds of `a` and of `b`, timed in turn (a, b, a, b, ...) for at least `min_seconds` in
/// all and 3 turns each: a shared host's speed drifts over seconds, and turns see the same drift.
std::pair<double, double> best_seconds(const std::function<void()>& a,
                                       const std::function<void()>& b, double min_seconds) {
  a();  // warm: first touch, thread start
  b();
  const auto seconds = [](const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double best_a = 1e30, best_b = 1e30, total = 0;
  for (int r = 0; r < 3 || total < min_seconds; ++r) {
    const double sa = seconds(a), sb = seconds(b);
    best_a = std::min(best_a, sa);
    best_b = std::min(best_b, sb);
    total += sa + sb;
  }
  return {best_a, best_b};
}

/// The contiguous accessor without its equality: attend_batch then forms no runs, and every row
/// reads the cache alone, as it did before runs.
template <class T>
struct RowByRow {
  cpu::ContiguousRows<T> rows;
  [[nodiscard]] const T* k(int t) const { return rows.k(t); }
  [[nodiscard]] const T* v(int t) const { return rows.v(t); }
};

/// One line of the table: both ways over one chunk of `n` rows after `before` cached positions.
template <class T>
void time_chunk(const ModelConfig& c, const char* kv_name, int n, int before, double min_time,
                const MeasuredPeak& peak, bool no_peak) {
  const int ctx = before + n;
  const long kv_dim = c.kv_dim(), q_dim = c.q_dim();
  std::vector<T> k(static_cast<std::size_t>(ctx) * kv_dim), v(k.size());
  std::mt19937 rng(static_cast<unsigned>(ctx));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::size_t e = 0; e < k.size(); ++e) {
    cpu::from_float(nd(rng), k[e]);
    cpu::from_float(nd(rng), v[e]);
  }
  std::vector<float> q(static_cast<std::size_t>(n) * q_dim);
  for (float& x : q) x = nd(rng);
  std::vector<float> shared(q.size()), alone(q.size());
  const cpu::AttendShape sh{c.n_kv_heads, c.group_size(), c.head_dim};
  const cpu::ContiguousRows<T> rows{k.data(), v.data(), kv_dim};
  const auto n_ctx_of = [&](int i) { return before + i + 1; };
  const auto [t_alone, t_shared] = best_seconds(
      [&] {
        cpu::attend_batch<T>(
            sh, n, [&](int) { return RowByRow<T>{rows}; }, n_ctx_of, q.data(), alone.data());
      },
      [&] {
        cpu::attend_batch<T>(
            sh, n, [&](int) { return rows; }, n_ctx_of, q.data(), shared.data());
      },
      min_time);
  if (std::memcmp(alone.data(), shared.data(), alone.size() * sizeof(float)) != 0)
    throw std::logic_error(fmt::format(
        "{} rows after {} positions: the runs' results differ from the rows' own", n, before));
  const double positions = static_cast<double>(n) * before + 0.5 * n * (n + 1.0);
  const double flops = 4.0 * positions * c.n_heads * c.head_dim;
  const double bytes = 2.0 * ctx * kv_dim * sizeof(T) + 2.0 * 4.0 * n * q_dim;
  const auto of = [&](double seconds, bool roof) -> std::string {
    if (no_peak) return "-";
    const double fma = flops / (peak.gflops * 1e9);
    return fmt::format("{:.2f}", (roof ? std::max(bytes / (peak.gbps * 1e9), fma) : fma) / seconds);
  };
  fmt::print(
      "| {} | {} | {} | {} | {:.0f} | {:.4f} | {:.2f} | {:.3f} | {:.3f} | {:.2f} | {:.1f} | {} | "
      "{} | {} |\n",
      c.name, kv_name, n, before, positions, flops / 1e9, bytes / 1e6, t_alone * 1e3,
      t_shared * 1e3, t_alone / t_shared, flops / t_shared / 1e9, of(t_alone, false),
      of(t_shared, false), of(t_shared, true));
}

}  // namespace
}  // namespace kvheap

int main(int argc, char** argv) {
  using namespace kvheap;
  CommandLine cli{
      "bench_prefill_attention_cpu: a prompt chunk's attention, row by row against runs of rows "
      "that read each tile once"};
  std::string model = "stories110m", rows_list = "16,128,512", before_list = "0,1024";
  double min_time = 0.2;
  bool no_peak = false;
  cli.option("--model", model, "Preset whose attention heads to time").show_default();
  cli.option("--rows", rows_list, "Rows per prompt chunk, comma-separated (1-4096)").show_default();
  cli.option("--before", before_list,
             "Positions already cached before the chunk, comma-separated (0-4096)")
      .show_default();
  cli.option("--min-time", min_time, "Seconds of repeats of both ways, at least (0-60)")
      .show_default();
  cli.flag("--no-peak", no_peak, "Skip measuring the peaks (no fractions are printed)");
  return run_cli(cli, argc, argv, [&] {
    const std::vector<int> rows = bench::counts_option(rows_list, "--rows", 1);
    const std::vector<int> befores = bench::counts_option(before_list, "--before", 0);
    bench::check_min_time(min_time);
    const int threads = apply_threads(CommonOptions{});
    const ModelConfig c = preset(model);
    const MeasuredPeak peak = no_peak ? MeasuredPeak{} : cpu_read_peak();
    const bool runs = cpu::runs_pay({c.n_kv_heads, c.group_size(), c.head_dim});
    fmt::print(
        "bench_prefill_attention_cpu: {}'s attention ({} query heads, {} KV heads, head_dim {}), "
        "{} threads, {}\n",
        c.name, c.n_heads, c.n_kv_heads, c.head_dim, threads,
        runs ? fmt::format("runs of up to {} rows", cpu::kRunRows)
             : fmt::format("no runs: a group of {} query heads fills the inner loops row by row "
                           "(both columns time the same code)",
                           c.group_size()));
    if (no_peak)
      fmt::print("peaks not measured (--no-peak): no fractions\n\n");
    else
      fmt::print("FMA peak {:.1f} GFLOP/s, read peak {:.2f} GB/s, both measured now\n\n",
                 peak.gflops, peak.gbps);
    fmt::print(
        "| model | KV | rows | before | positions attended | GFLOP | MB (K, V, q, out) | row by "
        "row "
        "ms | runs ms | speed-up | runs GFLOP/s | row by row of FMA peak | runs of FMA peak | "
        "runs of roofline |\n");
    fmt::print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const int before : befores)
      for (const int n : rows) {
        time_chunk<float>(c, "fp32", n, before, min_time, peak, no_peak);
        time_chunk<cpu::BF16Bits>(c, "bf16", n, before, min_time, peak, no_peak);
      }
  });
}
