// The CPU cache sizes the CPU benchmarks size their working sets by.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>

#include "common/measure/bandwidth.hpp"
#include "common/measure/working_set.hpp"

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

/// \brief kvheap::cold_set_window for this host's last-level cache and memory.
inline ColdSetWindow cold_set_window(std::size_t cap) {
  return kvheap::cold_set_window(cap, llc_bytes(), physical_memory_bytes());
}

}  // namespace kvheap::bench
