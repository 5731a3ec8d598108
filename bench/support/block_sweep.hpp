// What bench_paged_attention_gpu (GPU) and bench_paged_attention_cpu share: the block-size sweep's
// batch of mixed context lengths, the tail waste of each block size, the sweep's output (a
// markdown table on stdout and in PREFIX.md, the same rows in PREFIX.csv for
// scripts/plot_block_sweep.py).
//
// Block size trades two costs. Small blocks waste little memory (a sequence's last block is on
// average half empty, so waste per sequence is about block_size / 2 slots) but scatter the rows
// attention reads; large blocks read like contiguous memory but strand more of the pool. Tail
// waste only shows with context lengths that are not multiples of the block size, so the sweep
// draws them at random.
#pragma once

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/support/command.hpp"
#include "bench/support/rows.hpp"

namespace kvheap::bench {

/// \brief The block sizes every sweep measures: 1, 2, 4, ..., 256.
inline constexpr int kSweepMaxBlockSize = 256;

/// \brief Registers `sweep(state, block_size)` as block_sweep/bf16/bsN for every sweep block
/// size, timed manually (the sweep reports its own time) in `unit` for at least `min_seconds`.
template <class Sweep>
void register_block_sweep(Sweep sweep, benchmark::TimeUnit unit, double min_seconds) {
  for (int bs = 1; bs <= kSweepMaxBlockSize; bs *= 2) {
    benchmark::RegisterBenchmark(fmt::format("block_sweep/bf16/bs{}", bs).c_str(),
                                 [sweep, bs](benchmark::State& s) { sweep(s, bs); })
        ->UseManualTime()
        ->Unit(unit)
        ->MinTime(min_seconds);
  }
}

/// \brief `n` context lengths drawn uniformly from [lo, hi] with a fixed seed, so every run and
/// every block size sees the same batch.
inline std::vector<int> sweep_contexts(int n, int lo, int hi, unsigned seed = 2024) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(lo, hi);
  std::vector<int> ctx(n);
  for (int& c : ctx) c = len(rng);
  return ctx;
}

/// \brief Slots the blocks of `ctx` occupy at `block_size`: sum of ceil(ctx / B) * B.
inline std::size_t slots_held(const std::vector<int>& ctx, int block_size) {
  std::size_t slots = 0;
  for (int c : ctx)
    slots += static_cast<std::size_t>((c + block_size - 1) / block_size) * block_size;
  return slots;
}

/// \brief Positions of `ctx`: the slots that hold a token.
inline std::size_t tokens_of(const std::vector<int>& ctx) {
  std::size_t n = 0;
  for (int c : ctx) n += static_cast<std::size_t>(c);
  return n;
}

/// \brief The median of `v` (the upper one for an even count); 0 when empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// \brief One block size of the sweep.
struct SweepRow {
  int block_size = 0;
  double paged_ms = 0.0;       ///< attention time over the paged pool
  double contiguous_ms = 0.0;  ///< the same batch over a contiguous reservation, timed alongside
  double gbps = 0.0;           ///< paged: useful bytes / time
  std::size_t slots = 0;       ///< slots of the blocks held
  std::size_t tokens = 0;      ///< slots that hold a token

  /// \brief Fraction of the held slots that hold no token (the last blocks' empty tails).
  [[nodiscard]] double tail_waste() const {
    return slots == 0 ? 0.0 : static_cast<double>(slots - tokens) / static_cast<double>(slots);
  }
};

/// \brief Prints `heading` (markdown: what ran, and any other tables) and the sweep as a markdown
/// table, and writes both to PREFIX.md and the sweep to PREFIX.csv. Returns false when a file
/// cannot be written.
inline bool write_sweep(const std::string& prefix, const std::string& heading,
                        const std::vector<SweepRow>& rows, std::size_t bytes_per_slot) {
  std::string md = heading + "\n\n";
  md +=
      "| block size | paged ms | contiguous ms | paged / contiguous | paged GB/s | "
      "tail waste % | MB stranded in tails |\n";
  md += "|---:|---:|---:|---:|---:|---:|---:|\n";
  std::string csv = "block_size,paged_ms,contiguous_ms,ratio,gbps,tail_waste_pct,slots,tokens\n";
  for (const SweepRow& r : rows) {
    const double ratio = r.contiguous_ms > 0 ? r.paged_ms / r.contiguous_ms : 0.0;
    const double stranded_mb = static_cast<double>((r.slots - r.tokens) * bytes_per_slot) / 1e6;
    md += fmt::format("| {} | {:.3f} | {:.3f} | {:.3f} | {:.1f} | {:.2f} | {:.1f} |\n",
                      r.block_size, r.paged_ms, r.contiguous_ms, ratio, r.gbps,
                      100.0 * r.tail_waste(), stranded_mb);
    csv += fmt::format("{},{:.6f},{:.6f},{:.4f},{:.3f},{:.4f},{},{}\n", r.block_size, r.paged_ms,
                       r.contiguous_ms, ratio, r.gbps, 100.0 * r.tail_waste(), r.slots, r.tokens);
  }
  fmt::print("\n{}", md);
  bool ok = true;
  for (const auto& [ext, text] : {std::pair{".md", &md}, std::pair{".csv", &csv}}) {
    const std::string path = prefix + ext;
    // The close too: a full disk shows only when the buffer is flushed.
    std::FILE* f = std::fopen(path.c_str(), "w");
    const bool written = f != nullptr && std::fputs(text->c_str(), f) >= 0;
    const bool closed = f != nullptr && std::fclose(f) == 0;
    if (!written || !closed) {
      fmt::print(stderr, "cannot write {}\n", path);
      ok = false;
    }
  }
  if (ok) fmt::print("sweep written to {}.md and {}.csv\n", prefix, prefix);
  return ok;
}

/// \brief The end of a paged-attention benchmark: `tables` (its markdown so far, maybe empty) alone
/// when the sweep was filtered out, else the sweep under it, headed by where it ran (`where`, e.g.
/// "CPU twin (2 threads)"), the sweep batch `ctx`, the peak it was measured against and the
/// command. Returns the program's exit code.
inline int finish_sweep(const std::string& prefix, const std::string& tables,
                        const std::string& where, const std::string& peak,
                        const std::vector<int>& ctx, const std::string& command,
                        const std::vector<SweepRow>& rows, std::size_t bytes_per_slot) {
  if (rows.empty()) {  // the sweep was filtered out: the other tables are all there is
    if (!tables.empty()) fmt::print("\n{}", tables);
    return 0;
  }
  const std::string heading =
      tables + fmt::format(
                   "{}Block-size sweep, {}: {} sequences of {}..{} positions ({} tokens), "
                   "Llama-3-8B heads, bf16, one layer. {}. Produced by `{}`.",
                   tables.empty() ? "" : "\n", where, ctx.size(),
                   *std::min_element(ctx.begin(), ctx.end()),
                   *std::max_element(ctx.begin(), ctx.end()), tokens_of(ctx), peak, command);
  return write_sweep(prefix, heading, rows, bytes_per_slot) ? 0 : 1;
}

}  // namespace kvheap::bench
