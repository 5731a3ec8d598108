#include "common/measure/bandwidth.hpp"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "base/error.hpp"
#include "common/measure/fma_peak.hpp"
#include "common/measure/working_set.hpp"

namespace kvheap {

std::size_t last_level_cache_bytes() {
  // sysfs describes the cache this core actually sees (some hypervisors make sysconf report the
  // whole socket's, or more); sysconf is the fallback.
  for (const char* level : {"index3", "index2"}) {
    std::ifstream f(std::string("/sys/devices/system/cpu/cpu0/cache/") + level + "/size");
    std::string size;
    if (f >> size && !size.empty()) {
      std::size_t n = std::stoul(size);
      if (size.back() == 'K') n <<= 10;
      if (size.back() == 'M') n <<= 20;
      if (n > 0) return n;
    }
  }
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return static_cast<std::size_t>(l3);
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l2 > 0 ? static_cast<std::size_t>(l2) : 0;
}

std::string MeasuredPeak::cached_note(std::string_view unit) const {
  const double mib = static_cast<double>(cache_bytes) / (1 << 20);
  const std::string cold =
      4 * mib < 1024 ? fmt::format("{:.0f} MiB", 4 * mib) : fmt::format("{:.1f} GiB", mib / 256);
  return fmt::format(
      "a {0} that reads less than 4x the {1:.0f} MiB cache in front of the peak's memory ({2}) "
      "finds part of what it reads still in that cache from the last {0}, so its rate is partly "
      "the cache's and can exceed the peak",
      unit, mib, cold);
}

MeasuredPeak cpu_read_peak() {
  return {measure_read_bandwidth().gbps, "STREAM-like read", last_level_cache_bytes(),
          measure_fma_peak().gflops};
}

std::size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  std::size_t bytes =
      pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
  // In a container the limit that matters is its cgroup's (v2: a number, or "max" for none).
  std::ifstream f("/sys/fs/cgroup/memory.max");
  std::string limit;
  if (f >> limit && !limit.empty() && limit.find_first_not_of("0123456789") == std::string::npos) {
    const std::size_t cap = std::stoull(limit);
    if (cap > 0 && (bytes == 0 || cap < bytes)) bytes = cap;
  }
  return bytes;
}

std::optional<std::size_t> available_memory_bytes() {
  // MemAvailable: what the kernel can hand out without swapping (free, plus caches it can drop).
  std::optional<std::size_t> bytes;
  std::ifstream info("/proc/meminfo");
  for (std::string key; info >> key;) {
    std::size_t kib = 0;
    std::string unit;
    if (!(info >> kib >> unit)) break;
    if (key == "MemAvailable:") {
      bytes = kib * 1024;
      break;
    }
  }
  // In a container, what is left under its cgroup's limit (v2), when that is less. The cgroup's
  // usage counts the page cache too; its inactive files are dropped before anything is killed,
  // so they count as room, as they do in MemAvailable.
  std::ifstream max_file("/sys/fs/cgroup/memory.max"),
      current_file("/sys/fs/cgroup/memory.current");
  std::string limit;
  std::size_t current = 0;
  if (max_file >> limit && !limit.empty() &&
      limit.find_first_not_of("0123456789") == std::string::npos && current_file >> current) {
    std::size_t inactive_file = 0;
    std::ifstream stat("/sys/fs/cgroup/memory.stat");
    for (std::string key; stat >> key;) {
      std::size_t value = 0;
      if (!(stat >> value)) break;
      if (key == "inactive_file") {
        inactive_file = value;
        break;
      }
    }
    const std::size_t used = current - std::min(current, inactive_file);
    const std::size_t cap = std::stoull(limit);
    const std::size_t room = cap > used ? cap - used : 0;
    if (!bytes || room < *bytes) bytes = room;
  }
  return bytes;
}

void require_host_memory(std::size_t bytes, const std::string& what, const std::string& remedy) {
  const std::optional<std::size_t> available = available_memory_bytes();
  if (!available || bytes <= *available) return;
  throw ResourceError(fmt::format(
      "{} needs {:.0f} MB, more than this host's available memory ({:.0f} MB of {:.0f} MB); {}",
      what, static_cast<double>(bytes) / 1e6, static_cast<double>(*available) / 1e6,
      static_cast<double>(physical_memory_bytes()) / 1e6, remedy));
}

ReadProbe::ReadProbe(std::size_t bytes) {
  if (bytes == 0)
    bytes = read_probe_default_bytes(last_level_cache_bytes(), physical_memory_bytes());
  n_ = static_cast<long>(bytes / sizeof(float));
  buf_ = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(n_));
  // First touch from the threads that will read, so pages land where they are used.
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n_; ++i) buf_[i] = static_cast<float>(i % 251);
}

double ReadProbe::pass() {
  // One stream per core is not always the fastest way to read: on some CPUs a core's bandwidth is
  // bound by how many misses its prefetchers keep in flight, and it takes several streams to fill
  // the memory's pipe (docs/results/cpu-intel-xeon.md). A peak must not be beaten by the kernels
  // it judges, so a pass is the better of both patterns.
  const double one = read(1);
  last_sums_[0] = last_sum_;
  const double four = read(4);
  last_sums_[1] = last_sum_;
  return std::max(one, four);
}

double ReadProbe::read(int streams) {
  const float* buf = buf_.get();
  const long n = n_;
  const auto t0 = std::chrono::steady_clock::now();
  float total = 0.0f;
#pragma omp parallel reduction(+ : total)
  {
    // Each thread reads the slice it first touched, cut into `streams` equal parts read side by
    // side, into 16 independent lanes: one accumulator would make every add wait for the previous
    // one and measure add latency, not memory.
    const long nt = omp_get_num_threads(), t = omp_get_thread_num();
    const long begin = n / nt * t, end = t == nt - 1 ? n : n / nt * (t + 1);
    const long part = (end - begin) / streams / 16 * 16;
    float acc[16] = {};
    for (long i = 0; i < part; i += 16)
      for (int s = 0; s < streams; ++s) {
        const float* p = buf + begin + s * part + i;
#pragma omp simd
        for (int k = 0; k < 16; ++k) acc[k] += p[k];
      }
    for (long i = begin + streams * part; i < end; ++i) acc[0] += buf[i];
    for (float a : acc) total += a;
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sink_ = sink_ + total;
  last_sum_ = total;
  return static_cast<double>(bytes()) / sec / 1e9;
}

BandwidthSample measure_read_bandwidth(std::size_t bytes, int repeats) {
  ReadProbe probe(bytes);
  BandwidthSample s;
  s.bytes = probe.bytes();
  s.threads = omp_get_max_threads();
  for (int r = 0; r < repeats; ++r) s.gbps = std::max(s.gbps, probe.pass());
  return s;
}

}  // namespace kvheap
