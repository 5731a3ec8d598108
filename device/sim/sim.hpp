// The host-side interface of the CPU simulator: launching a kernel, asking what a pointer points
// into, opening device memory to simulator-side host code, and choosing how many OS threads run
// blocks. Kernels never include this (they include device/cuda_compat.hpp); kvheap::launch and
// the device layer do. Only built with KVHEAP_CUDA=sim.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace kvheap::sim {

/// \brief A pointer-typed kernel parameter, for the launch-time check that it is device memory.
struct PointerArg {
  int index = 0;                ///< position in the kernel's parameter list
  const void* value = nullptr;  ///< the pointer passed, after conversion to the parameter type
  bool read_only = false;       ///< a pointer to const: the kernel only reads through it
};

/// \brief One kernel launch, erased to plain data so the simulator itself is not a template.
struct LaunchSpec {
  std::string_view kernel_name;        ///< for messages: "block_sum<256>"
  const void* kernel = nullptr;        ///< identity for cudaFuncSetAttribute
  dim3 grid;                           ///< blocks in the grid
  dim3 block;                          ///< threads per block
  std::size_t dynamic_smem_bytes = 0;  ///< dynamic shared memory per block, in bytes
  cudaStream_t stream = nullptr;       ///< must be a live stream (or null); the run is synchronous
  void (*run_thread)(const void* args) = nullptr;  ///< runs the kernel body as the current thread
  const void* args = nullptr;                      ///< the converted parameters (a std::tuple)
  std::span<const PointerArg> pointer_args;        ///< pointer parameters, checked before running
};

/// \brief Checks the launch like a GPU would, then runs every block to completion.
///
/// Returns cudaSuccess, cudaErrorInvalidValue for a launch a GPU running CUDA 13
/// would refuse, or cudaErrorLaunchFailure for a kernel that deadlocked, trapped or threw. Also
/// records the error for cudaGetLastError, and the details in last_error_detail().
cudaError_t launch_kernel(const LaunchSpec& spec);

/// \brief Details of the last failed simulator call on this host thread ("" when none): the
/// deadlock report, the launch limit exceeded, the memcpy range that overruns its allocation.
const std::string& last_error_detail();

/// \brief What a pointer points into.
enum class PointerKind {
  Host,         ///< not allocated by the simulator (host stack, heap, globals)
  Device,       ///< inside (or one past the end of) a live cudaMalloc block
  Pinned,       ///< inside a cudaMallocHost block
  FreedDevice,  ///< inside a cudaMalloc block that has been freed
};

/// \brief Classifies `p`.
PointerKind classify_pointer(const void* p);

/// \brief Bytes from `p` to the end of its live device or pinned allocation; 0 for other pointers.
std::size_t bytes_available(const void* p);

/// \brief Number of OS threads that run blocks: KVHEAP_SIM_THREADS, else the hardware's thread
/// count capped at 8 (each worker keeps up to 1024 fiber stacks). 1 gives a deterministic order.
int worker_threads();

/// \brief Overrides worker_threads() for later launches (tests use it); n is clamped to [1, 64].
void set_worker_threads(int n);

/// \brief Lets host code touch any device memory for its lifetime: each block opens on its first
/// access (see DeviceMemory::open_on_fault) and closes when the scope ends.
///
/// Device allocations are PROT_NONE outside launches and copies so that stray host accesses
/// crash; simulator-side code that plays the device's part (the Eigen GEMM) opens them with this.
class ScopedDeviceAccess {
 public:
  ScopedDeviceAccess();
  ~ScopedDeviceAccess();
  ScopedDeviceAccess(const ScopedDeviceAccess&) = delete;
  ScopedDeviceAccess& operator=(const ScopedDeviceAccess&) = delete;
};

}  // namespace kvheap::sim
