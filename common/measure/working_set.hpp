// How large a buffer a bandwidth measurement reads so that the cache in front of the memory
// cannot hold it, as pure functions of the cache and memory sizes, so that they can be tested
// for the machines they were written for without running on them.
#pragma once

#include <cstddef>
#include <string>

namespace kvheap {

/// \brief The read probe's default buffer for a host with a last-level cache of `llc` bytes and
/// `memory` bytes of memory (0: unknown): 8x the LLC, at least 256 MiB, and at most the larger of
/// 1 GiB and an eighth of memory. 8x the LLC defeats the cache; the cap keeps the probe quick yet
/// lets it grow past 1 GiB where memory allows, because a server VM may share an L3 of 260 MiB and
/// a 1 GiB probe there would read a quarter of itself from that cache.
std::size_t read_probe_default_bytes(std::size_t llc, std::size_t memory);

/// \brief The cold-cache configurations a CPU benchmark runs: K+V working sets of [min, max]
/// bytes, each allocating at most `allocation_cap` bytes in all.
struct ColdSetWindow {
  std::size_t min;             ///< 4x the last-level cache: the cache holds at most a quarter
  std::size_t max;             ///< the benchmark's cap, raised where the floor comes near it
  std::size_t allocation_cap;  ///< half of this host's memory (0: unknown, no cap)

  /// \brief Why the configuration `name`, which reads `set` bytes per call and allocates
  /// `allocated` bytes (a reservation of max_seq_len per sequence is far larger than what it
  /// reads), does not run; empty when it does.
  [[nodiscard]] std::string skip_reason(const std::string& name, std::size_t set,
                                        std::size_t allocated) const;

  /// \brief Whether that configuration runs; if not, says so on stderr, and why (stderr, so that
  /// a listing of the benchmarks on stdout holds their names only).
  [[nodiscard]] bool admits(const std::string& name, std::size_t set, std::size_t allocated) const;
};

/// \brief The window for a benchmark whose own cap is `cap` bytes, on a host with a last-level
/// cache of `llc` bytes (0: unknown, taken as 32 MiB) and `memory` bytes (0: unknown, no limit):
/// from 4x the LLC up to the larger of `cap` and twice that floor, but never more than an eighth of
/// memory. The raised cap keeps a grid from coming up empty on a server VM that reports a large
/// shared L3 (260 MiB on a 2-vCPU Xeon: a floor of 1040 MiB, above a 1 GiB cap); on such a machine
/// the benchmarks run longer, on larger caches.
ColdSetWindow cold_set_window(std::size_t cap, std::size_t llc, std::size_t memory);

}  // namespace kvheap
