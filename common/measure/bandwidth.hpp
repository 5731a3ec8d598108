// A STREAM-like read bandwidth probe: the peak that decode throughput is compared against.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kvheap {

/// \brief Result of a bandwidth probe.
struct BandwidthSample {
  double gbps = 0.0;      ///< best of the repeats, 1e9 bytes per second
  std::size_t bytes = 0;  ///< working-set size
  int threads = 0;        ///< OpenMP threads that read
};

/// \brief Size of the last-level cache in bytes (0 when the OS does not say).
std::size_t last_level_cache_bytes();

/// \brief Physical memory of this host in bytes, or its cgroup's memory limit when that is lower
/// (0 when the OS does not say).
std::size_t physical_memory_bytes();

/// \brief Memory this process can still commit, in bytes: /proc/meminfo's MemAvailable, or what
/// is left under its cgroup's limit (v2; the cgroup's inactive file cache counted as room) when
/// that is less; nothing when neither can be read.
std::optional<std::size_t> available_memory_bytes();

/// \brief Throws ResourceError, naming `what`, both sizes and what to change (`remedy`), when
/// `bytes` is more than available_memory_bytes(); checks nothing when that is unknown.
void require_host_memory(
    std::size_t bytes, const std::string& what,
    const std::string& remedy = "give a smaller --kv-budget-mb, or fewer or shorter requests");

/// \brief A STREAM-like read probe that keeps its buffer, so that it can be read again and again:
/// between a kernel's runs, for instance, to compare each run with the bandwidth of the same
/// moment on a machine whose bandwidth drifts.
///
/// The buffer (default: 8x the last-level cache, at least 256 MiB and at most 1 GiB or an eighth
/// of physical memory, whichever is larger) is read by all
/// OpenMP threads, summing floats so the loads cannot be optimised away. Each thread reads the
/// slice it first touched, as the decode matmul does with its slice of every weight matrix, once
/// front to back and once as four parts side by side: some CPUs need several streams per core to
/// reach their memory's bandwidth, and the peak is the better of the two.
class ReadProbe {
 public:
  /// \brief Allocates and first-touches the buffer (`bytes` = 0: the default size).
  explicit ReadProbe(std::size_t bytes = 0);

  /// \brief The better of two timed reads of the whole buffer (one stream and four streams per
  /// thread), in 1e9 bytes per second.
  double pass();
  /// \brief Size of the buffer in bytes.
  [[nodiscard]] std::size_t bytes() const { return static_cast<std::size_t>(n_) * sizeof(float); }
  /// \brief The sums of the floats that the last pass's two reads saw (one stream, four streams):
  /// a test's check that each read saw every float once. The buffer holds i % 251, so the sums
  /// are exact only while they stay below 2^24 (buffers of up to about 130,000 floats).
  [[nodiscard]] std::array<double, 2> last_sums() const { return last_sums_; }

 private:
  double read(int streams);  // one timed read, each thread's slice as `streams` parts side by side

  std::unique_ptr<float[]> buf_;
  long n_;
  double last_sum_ = 0.0;              // of the last read
  std::array<double, 2> last_sums_{};  // of the last pass's two reads
  volatile float sink_ = 0.0f;         // the sums go here, so that no pass can be optimised away
};

/// \brief The best of `repeats` passes of a fresh ReadProbe of `bytes`.
BandwidthSample measure_read_bandwidth(std::size_t bytes = 0, int repeats = 3);

/// \brief A bandwidth peak as a program reports it next to its own rate: how fast, what was
/// measured, and how large a cache sits in front of that memory.
struct MeasuredPeak {
  double gbps = 0.0;            ///< 1e9 bytes per second; 0 when not measured
  std::string kind;             ///< "STREAM-like read", "device-to-device copy"
  std::size_t cache_bytes = 0;  ///< a CPU's last-level cache or a GPU's L2 (0 when unknown)
  double gflops = 0.0;  ///< the fp32 multiply-add peak, 1e9 FLOP/s (a CPU's; 0 when not measured)

  /// \brief Whether a working set of `bytes`, read again and again, is less than 4x that cache,
  /// the smallest size the benchmarks count as cold. Part of such a set stays in the cache from
  /// one pass to the next (all of it when it fits), so a rate measured on it is partly the
  /// cache's and may exceed the peak, which is measured on a larger buffer (a CPU's read probe
  /// reads 8x its last-level cache where memory allows; a GPU's copy peak moves 1 GiB).
  [[nodiscard]] bool partly_cached(double bytes) const {
    return cache_bytes > 0 && bytes < 4.0 * static_cast<double>(cache_bytes);
  }

  /// \brief The one sentence every report prints under a rate that partly_cached() marks, with
  /// `unit` the word for what is read once per pass ("step", "pass"). Lower case and without a
  /// full stop, so that a table can put it after its "*" and a line inside parentheses.
  [[nodiscard]] std::string cached_note(std::string_view unit) const;
};

/// \brief The CPU's STREAM-like read peak (measure_read_bandwidth), its last-level cache and its
/// fp32 multiply-add peak (measure_fma_peak): the two roofs of a CPU roofline.
MeasuredPeak cpu_read_peak();

}  // namespace kvheap
