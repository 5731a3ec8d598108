// What host code asks of the simulated device, counted: copies each way and their bytes,
// synchronisations, allocations and frees, kernel launches and GEMMs; and the bytes kernels load
// with asynchronous copies. A test reads them around
// one forward pass to hold the serving loop to its budget (one upload, 16 bytes a logit row down,
// no free in a steady pass): the simulator runs every copy synchronously, so it cannot time the
// host's overhead, but it can count it. Only built with KVHEAP_CUDA=sim.
#pragma once

namespace kvheap::sim {

/// \brief Runtime calls since the last reset_counters(), by kind.
struct ApiCounters {
  long uploads = 0;        ///< host-to-device copies (cudaMemcpy*, cudaMemcpyToSymbol)
  long bytes_up = 0;       ///< their bytes
  long downloads = 0;      ///< device-to-host copies
  long bytes_down = 0;     ///< their bytes
  long device_copies = 0;  ///< device-to-device copies and memsets
  long syncs = 0;          ///< cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize
  long allocations = 0;    ///< cudaMalloc and cudaMallocHost/cudaHostAlloc
  long frees = 0;          ///< cudaFree and cudaFreeHost of a live allocation
  long launches = 0;       ///< kernel launches, and GEMMs (cuBLAS launches kernels for them)
  /// Bytes kernels loaded from global into shared memory with cp.async
  /// (__pipeline_memcpy_async), zero fill not counted: what attention kernels read of the cache,
  /// counted from the loads they make rather than from their plan.
  long kernel_copy_bytes = 0;

  /// \brief The counts of `this` minus those of `before`: what happened in between.
  [[nodiscard]] ApiCounters since(const ApiCounters& before) const;
};

/// \brief The counts so far (every host thread's calls together).
ApiCounters api_counters();

/// \brief Sets every count to 0.
void reset_counters();

namespace detail {
/// \brief The kinds a runtime call counts as; the simulator's runtime calls count() itself.
enum class Count { Upload, Download, DeviceCopy, Sync, Allocation, Free, Launch, KernelCopy };
/// \brief Adds one call of `kind` moving `bytes` (copies only; KernelCopy adds only its bytes).
void count(Count kind, long bytes = 0);
}  // namespace detail

}  // namespace kvheap::sim
