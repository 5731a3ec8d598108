// cuda_compat.hpp: the one header every kvheap .cu file includes, first.
//
// Under nvcc it is the CUDA runtime and the half-precision headers. In the simulator build
// (KVHEAP_CUDA=sim, which defines KVHEAP_SIM) the same .cu file is compiled as C++ by the host
// compiler, and this header supplies what nvcc would: the CUDA keywords, threadIdx & co.,
// __syncthreads, warp shuffles and votes, atomics and math intrinsics, running each CUDA thread
// of a block as a fiber on the CPU (device/sim/). Every kernel then runs in CI without a GPU.
//
// Rules for kernel authors (they keep one source correct in both builds):
//
//  1. Include "device/cuda_compat.hpp" first in every .cu; do not include cuda_runtime.h or
//     cuda_fp16.h yourself. Host-side code (.cpp) includes device/device.hpp instead.
//  2. Launch every kernel with kvheap::launch<kernel>(grid, block, smem_bytes, stream, args...)
//     from device/launch.hpp: triple chevrons do not exist in the simulator. Put the launch in
//     the .cu file, behind a plain C++ function that host code calls.
//  3. Dynamic shared memory comes only from kvheap::dynamic_smem<T>(); `extern __shared__` does
//     not compile in the simulator. More than 48 KiB needs cudaFuncSetAttribute(kernel,
//     cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) first, exactly as on a GPU (227 KiB at
//     most). The simulator fills it with 0xff bytes at block start, so reading it before
//     writing it shows up as NaNs.
//  4. Static __shared__ variables become `static thread_local`: no initialisers (as in CUDA), and
//     garbage at block start (as in CUDA). Blocks never see each other's.
//  5. Fibers switch only at sync points (__syncthreads*, __syncwarp, shuffles, votes, mma). The
//     simulator does NOT detect data races: a missing barrier can look fine here and fail on a
//     GPU. Run compute-sanitizer --tool racecheck on a GPU (scripts/gpu-check.sh) for that.
//     Warp-synchronous code that relies on lockstep execution without __syncwarp is wrong on
//     both (and fails here, since lanes run one after another).
//  6. Every thread of a block must reach every __syncthreads, at the same call site. A divergent
//     barrier, or threads that returned while others wait, fails the launch with a report that
//     names the kernel, the barrier and the missing threads (CUDA leaves it undefined; a GPU may
//     hang or silently go on).
//  7. Warp intrinsics follow CUDA's rules: the calling lane must be in the mask; lanes of the mask
//     that have exited (or do not exist, in a partial last warp) are not waited for; a shuffle
//     that reads a lane that did not take part gets all-ones bits (NaN for floats).
//  8. Code for newer GPUs sits behind `#if __CUDA_ARCH__ >= 900` (or 800) with a portable #else;
//     the simulator defines no __CUDA_ARCH__ and compiles the portable branch. Inline PTX only
//     inside such guards. Tensor-core products go through kernels/mma.cuh, whose simulator twin
//     is a warp collective of all 32 lanes (device/sim/sync.cpp), not a portable fallback.
//  9. Device code may call the math functions of <cmath> and those in
//     device/sim/device_functions.hpp; the fast-math intrinsics are computed at full precision
//     here. A missing intrinsic is a compile error in the simulator build: add it there.
// 10. A failing device-side assert() aborts the simulator process (on a GPU it fails the kernel
//     and poisons the context); __trap() fails just the launch, with its file:line.
// 11. Kernel parameters are passed by value and must be trivially copyable. Pointer parameters
//     must be null or point into device memory (cudaMalloc) or pinned host memory
//     (cudaMallocHost); the simulator checks that at launch. Pointers inside structs are not
//     checked, but host code dereferencing device memory crashes with a message saying so.
#pragma once

#if !defined(KVHEAP_SIM) && !defined(__CUDACC__)
#error "device/cuda_compat.hpp is for .cu files: compile them with nvcc or in the KVHEAP_SIM build"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>

#if !defined(KVHEAP_SIM)
#include <cuda_pipeline_primitives.h>  // cp.async: __pipeline_memcpy_async and its waits
#endif

#if defined(KVHEAP_SIM)
#include "device/sim/device_functions.hpp"
#include "device/sim/intrinsics.hpp"
#include "device/sim/runtime_templates.hpp"
#endif

namespace kvheap {

/// \brief The block's dynamic shared memory (the launch's smem_bytes), viewed as T.
///
/// Under nvcc this is the kernel's `extern __shared__` array (16-byte aligned); in the simulator
/// it is the block's buffer (128-byte aligned), or null when the launch asked for 0 bytes.
template <class T>
__device__ __forceinline__ T* dynamic_smem() {
#if defined(KVHEAP_SIM)
  return reinterpret_cast<T*>(sim::detail::t_dynamic_smem);
#else
  extern __shared__ __align__(16) unsigned char kvheap_dynamic_smem[];
  return reinterpret_cast<T*>(kvheap_dynamic_smem);
#endif
}

/// \brief Bytes of dynamic shared memory the running block was launched with.
__device__ __forceinline__ unsigned dynamic_smem_bytes() {
#if defined(KVHEAP_SIM)
  return static_cast<unsigned>(sim::detail::t_dynamic_smem_bytes);
#else
  unsigned bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
#endif
}

}  // namespace kvheap
