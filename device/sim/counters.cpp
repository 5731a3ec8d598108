// The simulator's call counters (counters.hpp): relaxed atomics, since blocks of a launch run on
// several OS threads and a test may read them from another.
#include "device/sim/counters.hpp"

#include <atomic>

namespace kvheap::sim {
namespace {

struct Atomics {
  std::atomic<long> uploads{0}, bytes_up{0}, downloads{0}, bytes_down{0}, device_copies{0},
      syncs{0}, allocations{0}, frees{0}, launches{0}, kernel_copy_bytes{0};
};
Atomics g_counts;

}  // namespace

ApiCounters ApiCounters::since(const ApiCounters& b) const {
  return {uploads - b.uploads,
          bytes_up - b.bytes_up,
          downloads - b.downloads,
          bytes_down - b.bytes_down,
          device_copies - b.device_copies,
          syncs - b.syncs,
          allocations - b.allocations,
          frees - b.frees,
          launches - b.launches,
          kernel_copy_bytes - b.kernel_copy_bytes};
}

ApiCounters api_counters() {
  const auto get = [](const std::atomic<long>& a) { return a.load(std::memory_order_relaxed); };
  return {get(g_counts.uploads),          get(g_counts.bytes_up),      get(g_counts.downloads),
          get(g_counts.bytes_down),       get(g_counts.device_copies), get(g_counts.syncs),
          get(g_counts.allocations),      get(g_counts.frees),         get(g_counts.launches),
          get(g_counts.kernel_copy_bytes)};
}

void reset_counters() {
  for (std::atomic<long>* a :
       {&g_counts.uploads, &g_counts.bytes_up, &g_counts.downloads, &g_counts.bytes_down,
        &g_counts.device_copies, &g_counts.syncs, &g_counts.allocations, &g_counts.frees,
        &g_counts.launches, &g_counts.kernel_copy_bytes})
    a->store(0, std::memory_order_relaxed);
}

namespace detail {

void count(Count kind, long bytes) {
  const auto add = [](std::atomic<long>& a, long v) { a.fetch_add(v, std::memory_order_relaxed); };
  switch (kind) {
    case Count::Upload:
      add(g_counts.uploads, 1);
      add(g_counts.bytes_up, bytes);
      break;
    case Count::Download:
      add(g_counts.downloads, 1);
      add(g_counts.bytes_down, bytes);
      break;
    case Count::DeviceCopy: add(g_counts.device_copies, 1); break;
    case Count::Sync: add(g_counts.syncs, 1); break;
    case Count::Allocation: add(g_counts.allocations, 1); break;
    case Count::Free: add(g_counts.frees, 1); break;
    case Count::Launch: add(g_counts.launches, 1); break;
    case Count::KernelCopy: add(g_counts.kernel_copy_bytes, bytes); break;
  }
}

}  // namespace detail
}  // namespace kvheap::sim
