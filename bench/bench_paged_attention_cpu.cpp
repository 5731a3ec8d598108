// bench_paged_attention_cpu: what paging costs the CPU twin of decode attention. The same batch is
// stored twice, in chapter 1's per-sequence reservation (cpu::ContiguousRows) and in chapter 3's
// shuffled block pool (cpu::PagedRows via ch03::BlockManager), and cpu::attend_batch runs over
// each, with the work split chapters 1 and 3 use. Builds and runs in every mode.
//
// Two parts:
//   1. paged (block size 16) vs contiguous, side by side, with their ratio: kvheap's goal is
//      paged / contiguous <= 1.10 on the CPU.
//   2. a block-size sweep 1, 2, 4, ..., 256 over a batch of mixed context lengths: time and tail
//      waste, written to PREFIX.md and PREFIX.csv (--sweep-out=PREFIX, default
//      block_size_sweep_cpu); scripts/plot_block_sweep.py plots the CSV.
//
// Timing: each iteration runs both layouts back to back, alternating which goes first, and the
// table reports the best time of each: on a shared machine other processes only ever add time
// (they preempt our threads), so the minimum is the least disturbed estimate, and alternation
// keeps a load change from landing on one side only. Both layouts must give bitwise equal outputs
// before anything is timed. Heads are Llama-3-8B's (32 query, 8 KV, head_dim 128), bf16, one
// layer; only working sets of at least 4x the last-level cache run (cold-cache numbers), and at
// most 512 MiB, to share the machine (or twice that floor where the LLC is larger than 64 MiB:
// bench/support/cpu_caches.hpp).
// Both layouts are allocated as the chapters' CPU caches are, on transparent huge pages
// (common/util/host_buffer.hpp); --huge-pages=0 gives both 4 KiB pages, to show what the TLB costs.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/support/block_sweep.hpp"
#include "bench/support/cpu_caches.hpp"
#include "bench/support/failures.hpp"
#include "chapters/03_paged_blocks/block_manager.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/util/host_buffer.hpp"
#include "common/model/model_config.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "kernels/paged_attention.hpp"

namespace kvheap {
namespace {

using T = cpu::BF16Bits;
constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr long kKvDim = static_cast<long>(kKvHeads) * kHeadDim;
constexpr long kMaxSeqLen = 32768;  // chapter 1's reservation per sequence
constexpr int kBlockSize = 16;

double g_peak_gbps = 0.0;
bool g_huge_pages = true;  // --huge-pages=0: back both layouts with 4 KiB pages instead

/// Host storage for `count` elements, allocated as the chapters' CPU caches allocate theirs
/// (common/util/host_buffer.hpp): huge pages unless --huge-pages=0 asks for 4 KiB pages.
struct HostArray {
  HostBuffer buf;
  T* get() { return buf.as<T>(); }
  const T* get() const { return buf.as<T>(); }
  T& operator[](std::size_t i) { return get()[i]; }
};
HostArray host_array(std::size_t count) {
  return {HostBuffer(count * sizeof(T), g_huge_pages ? PageSize::kHuge : PageSize::kSmall)};
}

/// The value stored at (row i, position t, element e) in both layouts.
float value(long i, long t, long e) {
  return static_cast<float>((i * 7919 + t * 31 + e) % 17) * 0.01f - 0.08f;
}

/// One batch of query rows and its K/V, stored contiguously and in a paged pool.
struct Layouts {
  std::vector<int> ctx;      // [n] positions each row attends over
  std::vector<long> base;    // [n] first row of row i's reservation
  HostArray flat_k, flat_v;  // [n * kMaxSeqLen, kv_dim], zero-filled like a reservation
  std::unique_ptr<ch03::BlockManager> blocks;
  std::vector<int> seq;      // [n] BlockManager id of row i
  HostArray pool_k, pool_v;  // [num_blocks * block_size, kv_dim]
  std::vector<float> q;      // [n, n_heads, head_dim]
};

/// Reservations go to rows in shuffled order; the pool holds exactly the blocks the batch needs
/// and hands them out shuffled. Memory is first touched by the threads that will read it.
Layouts make_layouts(const std::vector<int>& ctx, int block_size) {
  Layouts l;
  l.ctx = ctx;
  const long n = static_cast<long>(ctx.size());
  std::vector<long> slot(n);
  std::iota(slot.begin(), slot.end(), 0L);
  std::shuffle(slot.begin(), slot.end(), std::mt19937(42));
  for (long i = 0; i < n; ++i) l.base.push_back(slot[i] * kMaxSeqLen);
  {
    l.flat_k = host_array(static_cast<std::size_t>(n) * kMaxSeqLen * kKvDim);
    l.flat_v = host_array(static_cast<std::size_t>(n) * kMaxSeqLen * kKvDim);
  }
  {
    const int num_blocks = static_cast<int>(bench::slots_held(ctx, block_size) / block_size);
    l.blocks = std::make_unique<ch03::BlockManager>(num_blocks, block_size, /*shuffle_seed=*/7);
    for (long i = 0; i < n; ++i) l.seq.push_back(l.blocks->allocate(ctx[i]));
    const std::size_t slots = static_cast<std::size_t>(num_blocks) * block_size;
    l.pool_k = host_array(slots * kKvDim);
    l.pool_v = host_array(slots * kKvDim);
  }
  std::vector<std::pair<long, long>> positions;  // (row, t) of every cached token
  for (long i = 0; i < n; ++i)
    for (long t = 0; t < ctx[i]; ++t) positions.emplace_back(i, t);
#pragma omp parallel for schedule(static)
  for (std::size_t p = 0; p < positions.size(); ++p) {
    const auto [i, t] = positions[p];
    const long block = l.blocks->page_table(l.seq[i])[t / block_size];
    const long slot_row = block * block_size + t % block_size;
    for (long e = 0; e < kKvDim; ++e) {
      T k{}, v{};
      cpu::from_float(value(i, t, e), k);
      cpu::from_float(-value(i, t, e), v);
      l.flat_k[(l.base[i] + t) * kKvDim + e] = k;
      l.flat_v[(l.base[i] + t) * kKvDim + e] = v;
      l.pool_k[slot_row * kKvDim + e] = k;
      l.pool_v[slot_row * kKvDim + e] = v;
    }
  }
  l.q.resize(static_cast<std::size_t>(n) * kHeads * kHeadDim);
  for (std::size_t j = 0; j < l.q.size(); ++j) l.q[j] = 0.02f * static_cast<float>(j % 11) - 0.1f;
  return l;
}

/// The batch's attention as the chapters run it; `rows_of(i)` is row i's accessor.
template <class RowsOf>
void attend_batch(const Layouts& l, float* out, RowsOf&& rows_of) {
  static const ModelConfig heads = preset("llama-3-8b");  // kHeads, kKvHeads, kHeadDim
  cpu::attend_batch<T>(
      cpu::AttendShape{heads.n_kv_heads, heads.group_size(), heads.head_dim},
      static_cast<int>(l.ctx.size()), rows_of, [&](int i) { return l.ctx[i]; }, l.q.data(), out);
}

void attend_contiguous(const Layouts& l, float* out) {
  attend_batch(l, out, [&](int i) {
    return cpu::ContiguousRows<T>{l.flat_k.get() + l.base[i] * kKvDim,
                                  l.flat_v.get() + l.base[i] * kKvDim, kKvDim};
  });
}

void attend_paged(const Layouts& l, float* out) {
  const int bs = l.blocks->pool().block_size();
  attend_batch(l, out, [&](int i) {
    return cpu::PagedRows<T>{l.pool_k.get(), l.pool_v.get(), l.blocks->page_table(l.seq[i]).data(),
                             bs, kKvDim};
  });
}

/// Napkin math: every row reads K and V of its n_ctx positions for all KV heads,
/// sum(n_ctx) * 2 * kv_dim * 2 B (bf16), plus q and out in fp32.
double bytes_moved(const Layouts& l) {
  return static_cast<double>(bench::tokens_of(l.ctx)) * 2.0 * kKvDim * sizeof(T) +
         2.0 * static_cast<double>(l.q.size()) * sizeof(float);
}

/// Checks both layouts agree bitwise, then times them in alternating pairs; returns the best
/// milliseconds {contiguous, paged}, or {0, 0} after reporting an error to `state`.
std::pair<double, double> time_pair(benchmark::State& state, const Layouts& l) {
  std::vector<float> out_c(l.q.size()), out_p(l.q.size());
  attend_contiguous(l, out_c.data());
  attend_paged(l, out_p.data());
  if (std::memcmp(out_c.data(), out_p.data(), out_c.size() * sizeof(float)) != 0) {
    bench::fail(state, "paged output differs from contiguous: not timing a wrong answer");
    return {0.0, 0.0};
  }
  std::vector<double> tc, tp;
  auto timed = [](auto&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  for (auto _ : state) {
    const bool paged_first = state.iterations() % 2 == 1;
    if (paged_first) tp.push_back(timed([&] { attend_paged(l, out_p.data()); }));
    tc.push_back(timed([&] { attend_contiguous(l, out_c.data()); }));
    if (!paged_first) tp.push_back(timed([&] { attend_paged(l, out_p.data()); }));
    benchmark::DoNotOptimize(out_p.data());
    state.SetIterationTime((tc.back() + tp.back()) * 1e-3);
  }
  return {*std::min_element(tc.begin(), tc.end()), *std::min_element(tp.begin(), tp.end())};
}

struct RatioRow {
  std::string config;
  double mb_moved, contiguous_ms, paged_ms;
};
std::vector<RatioRow> g_ratio;
std::vector<bench::SweepRow> g_sweep;

/// The layouts of the benchmark now running. Google Benchmark calls a function more than once
/// (a one-iteration trial, then the timed run), and filling hundreds of MB each time would cost
/// more than the measurement; only one is kept, to bound memory.
const Layouts& layouts_for(const std::vector<int>& ctx, int block_size) {
  static std::unique_ptr<Layouts> kept;
  if (!kept || kept->ctx != ctx || kept->blocks->pool().block_size() != block_size) {
    kept.reset();  // free first: two batches of this size may not fit side by side
    kept = std::make_unique<Layouts>(make_layouts(ctx, block_size));
  }
  return *kept;
}

void paged_vs_contiguous(benchmark::State& state, int batch, int ctx) {
  const Layouts& l = layouts_for(std::vector<int>(batch, ctx), kBlockSize);
  const auto [c_ms, p_ms] = time_pair(state, l);
  if (c_ms == 0.0) return;
  state.counters["ratio"] = p_ms / c_ms;
  state.counters["paged_GBps"] = bytes_moved(l) / (p_ms * 1e-3) / 1e9;
  const std::string config =
      fmt::format("batch {}, ctx {}, bf16, {} threads", batch, ctx, omp_get_max_threads());
  bench::keep_last(g_ratio, RatioRow{config, bytes_moved(l) / 1e6, c_ms, p_ms},
                   [](const RatioRow& a, const RatioRow& b) { return a.config == b.config; });
}

const std::vector<int>& sweep_batch() {
  // 16 sequences of 256..8192 positions: about 270 MB of K and V in bf16.
  static const std::vector<int> ctx = bench::sweep_contexts(16, 256, 8192);
  return ctx;
}

void block_sweep(benchmark::State& state, int block_size) {
  const Layouts& l = layouts_for(sweep_batch(), block_size);
  const auto [c_ms, p_ms] = time_pair(state, l);
  if (c_ms == 0.0) return;
  bench::SweepRow r;
  r.block_size = block_size;
  r.paged_ms = p_ms;
  r.contiguous_ms = c_ms;
  r.gbps = bytes_moved(l) / (p_ms * 1e-3) / 1e9;
  r.slots = bench::slots_held(l.ctx, block_size);
  r.tokens = bench::tokens_of(l.ctx);
  state.counters["ratio"] = p_ms / c_ms;
  state.counters["tail_waste_pct"] = 100.0 * r.tail_waste();
  bench::keep_last(g_sweep, r,
                   [](const auto& a, const auto& b) { return a.block_size == b.block_size; });
}

}  // namespace
}  // namespace kvheap

int main(int argc, char** argv) {
  using namespace kvheap;
  const std::string command = bench::command_line(argc, argv);
  const bool listing = bench::initialize(argc, argv);
  const std::string prefix = bench::flag_value(argc, argv, "sweep-out", "block_size_sweep_cpu");
  g_huge_pages = bench::flag_value(argc, argv, "huge-pages", "1") == "1";
  const std::size_t llc = bench::llc_bytes();
  const ColdSetWindow window = bench::cold_set_window(std::size_t{512} << 20);
  for (int batch : {1, 8, 32}) {
    for (int ctx : {4096, 16384, 32768}) {
      const std::size_t set = static_cast<std::size_t>(batch) * ctx * 2 * kKvDim * sizeof(T);
      const std::string name = fmt::format("paged_vs_contiguous/bf16/batch{}/ctx{}", batch, ctx);
      // Both layouts at once: reservations of max_seq_len per sequence, and a pool of about the
      // set.
      const std::size_t allocated =
          set + static_cast<std::size_t>(batch) * kMaxSeqLen * 2 * kKvDim * sizeof(T);
      if (!window.admits(name, set, allocated)) continue;
      benchmark::RegisterBenchmark(
          name.c_str(), [batch, ctx](benchmark::State& s) { paged_vs_contiguous(s, batch, ctx); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(2.0);
    }
  }
  bench::register_block_sweep(block_sweep, benchmark::kMillisecond, 2.0);
  // A listing runs nothing, so it needs no peak: the names are all it prints.
  if (listing) return bench::list_benchmarks();
  g_peak_gbps = measure_read_bandwidth().gbps;
  bench::run_benchmarks();
  if (g_ratio.empty() && g_sweep.empty())  // nothing measured: no table
    return bench::exit_status("bench_paged_attention_cpu");

  // The peak again after the runs: the better of the two, so a busy moment at start cannot
  // flatter the fraction.
  g_peak_gbps = std::max(g_peak_gbps, measure_read_bandwidth().gbps);
  std::string md;
  if (!g_ratio.empty())
    md = fmt::format(
        "Paged vs contiguous attention, CPU twin. STREAM-like read peak: {:.2f} GB/s ({} threads, "
        "LLC {} KiB, {}). Goal: paged / contiguous <= 1.10.\n\n"
        "| config | MB moved | contiguous ms | paged ms (bs {}) | paged / contiguous | "
        "paged GB/s | % of read peak |\n|---|---:|---:|---:|---:|---:|---:|\n",
        g_peak_gbps, omp_get_max_threads(), llc / 1024,
        g_huge_pages ? "transparent huge pages" : "4 KiB pages", kBlockSize);
  for (const RatioRow& r : g_ratio) {
    const double gbps = r.mb_moved / r.paged_ms;  // MB per ms = GB/s
    md += fmt::format("| {} | {:.1f} | {:.2f} | {:.2f} | {:.3f} | {:.2f} | {:.1f} |\n", r.config,
                      r.mb_moved, r.contiguous_ms, r.paged_ms, r.paged_ms / r.contiguous_ms, gbps,
                      100.0 * gbps / g_peak_gbps);
  }
  const int status =
      bench::finish_sweep(prefix, md, fmt::format("CPU twin ({} threads)", omp_get_max_threads()),
                          fmt::format("Read peak {:.2f} GB/s", g_peak_gbps), sweep_batch(), command,
                          g_sweep, 2 * kKvDim * sizeof(T));
  return bench::exit_status("bench_paged_attention_cpu", status);
}
