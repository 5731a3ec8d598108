// The CPU cache sizes the CPU benchmarks size their working sets by.
#pragma once

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "common/bandwidth.hpp"

namespace kvheap::bench {

/// \brief The last-level cache: the per-instance size the kernel reports in sysfs (Google
/// Benchmark's CPUInfo reads it), else sysconf's. Some glibc versions report an AMD socket's total
/// L3 through sysconf (320 MiB for a machine with 32 MiB per instance), which would rule out every
/// working-set size a benchmark tries.
inline std::size_t llc_bytes() {
  std::size_t llc = 0;
  for (const auto& c : benchmark::CPUInfo::Get().caches)
    if (c.type != "Instruction") llc = std::max(llc, static_cast<std::size_t>(c.size));
  return llc > 0 ? llc : last_level_cache_bytes();
}

/// \brief One core's share of the L2 (its reported size over the cores sharing it), or
/// `fallback` when the CPU reports none.
inline std::size_t l2_bytes_per_core(std::size_t fallback) {
  for (const auto& c : benchmark::CPUInfo::Get().caches)
    if (c.level == 2 && c.type != "Instruction" && c.size > 0)
      return static_cast<std::size_t>(c.size) / std::max(1, c.num_sharing);
  return fallback;
}

/// \brief The cold-cache configurations a CPU benchmark runs: K+V working sets of [min, max]
/// bytes, each allocating at most `allocation_cap` bytes in all.
struct ColdSetWindow {
  std::size_t min;             ///< 4x the last-level cache: the cache holds at most a quarter
  std::size_t max;             ///< the benchmark's cap, raised where the floor comes near it
  std::size_t allocation_cap;  ///< half of this host's memory (0: unknown, no cap)

  /// \brief Whether a configuration that reads `set` bytes per call and allocates `allocated`
  /// bytes (a reservation of max_seq_len per sequence is far larger than what it reads) runs; if
  /// not, says so on stdout, and why.
  [[nodiscard]] bool admits(const std::string& name, std::size_t set, std::size_t allocated) const {
    if (max < min) {
      fmt::print("{}: skipped, this host's memory cannot hold a working set of 4 x LLC = {} MiB\n",
                 name, min >> 20);
      return false;
    }
    if (set < min || set > max) {
      fmt::print("{}: skipped, K+V working set {} MiB is outside [4 x LLC = {} MiB, {} MiB]\n",
                 name, set >> 20, min >> 20, max >> 20);
      return false;
    }
    if (allocation_cap > 0 && allocated > allocation_cap) {
      fmt::print("{}: skipped, it allocates {} MiB, more than half of this host's memory\n", name,
                 allocated >> 20);
      return false;
    }
    return true;
  }
};

/// \brief The window for a benchmark whose own cap is `cap` bytes: from 4x the LLC up to the
/// larger of `cap` and twice that floor, but never more than an eighth of physical memory. The
/// raised cap keeps a grid from coming up empty on a server VM that reports a large shared L3
/// (260 MiB on a 2-vCPU Xeon: a floor of 1040 MiB, above a 1 GiB cap); on such a machine the
/// benchmarks run longer, on larger caches.
inline ColdSetWindow cold_set_window(std::size_t cap) {
  const std::size_t llc = llc_bytes();
  const std::size_t floor = 4 * (llc > 0 ? llc : std::size_t{32} << 20);
  std::size_t top = std::max(cap, 2 * floor);
  const std::size_t memory = physical_memory_bytes();
  if (memory > 0) top = std::min(top, memory / 8);
  return {floor, top, memory / 2};
}

}  // namespace kvheap::bench
