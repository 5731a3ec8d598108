// The CUDA built-ins a kernel uses, for .cu files compiled as C++ against the CPU simulator:
// execution-space keywords, threadIdx & co., __shared__, barriers, warp shuffles and votes.
// Included by device/cuda_compat.hpp under KVHEAP_SIM, never directly.
//
// Each intrinsic takes a defaulted SourceSite (file:line of the call) so a deadlock report can
// say which call is waiting; kernels call them exactly as under nvcc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <cstdint>
#include <cstring>

#include "device/sim/thread_state.hpp"

// The toolkit headers define the execution-space keywords as nothing for a host compiler; that is
// right for __global__, __device__, __host__ and __constant__. Shared memory must be per block:
// one OS thread runs one block at a time, so per-OS-thread static storage is exactly that.
#undef __shared__
#define __shared__ static thread_local
// Launch bounds tell ptxas how many threads a block may have, for its register allocation; the
// simulator allocates no registers (the launch's own checks still apply).
#undef __launch_bounds__
#define __launch_bounds__(...)

// Built-in variables, read-only as in CUDA.
#define threadIdx (static_cast<const uint3&>(::kvheap::sim::detail::t_thread_idx))
#define blockIdx (static_cast<const uint3&>(::kvheap::sim::detail::t_block_idx))
#define blockDim (static_cast<const dim3&>(::kvheap::sim::detail::t_block_dim))
#define gridDim (static_cast<const dim3&>(::kvheap::sim::detail::t_grid_dim))
inline constexpr int warpSize = 32;

// ---- block barriers -----------------------------------------------------------------------------

/// \brief Waits until every thread of the block has reached this same __syncthreads.
inline void __syncthreads(::kvheap::sim::detail::SourceSite site = {}) {
  ::kvheap::sim::detail::block_sync(::kvheap::sim::detail::BlockSync::Plain, 0, site);
}
/// \brief __syncthreads that returns how many threads passed a non-zero predicate.
inline int __syncthreads_count(int predicate, ::kvheap::sim::detail::SourceSite site = {}) {
  return ::kvheap::sim::detail::block_sync(::kvheap::sim::detail::BlockSync::Count, predicate,
                                           site);
}
/// \brief __syncthreads that returns non-zero when every thread's predicate is non-zero.
inline int __syncthreads_and(int predicate, ::kvheap::sim::detail::SourceSite site = {}) {
  return ::kvheap::sim::detail::block_sync(::kvheap::sim::detail::BlockSync::And, predicate, site);
}
/// \brief __syncthreads that returns non-zero when any thread's predicate is non-zero.
inline int __syncthreads_or(int predicate, ::kvheap::sim::detail::SourceSite site = {}) {
  return ::kvheap::sim::detail::block_sync(::kvheap::sim::detail::BlockSync::Or, predicate, site);
}

// ---- warp collectives ---------------------------------------------------------------------------

/// \brief Waits until the (non-exited) lanes of `mask` reach a __syncwarp with the same mask.
inline void __syncwarp(unsigned mask = 0xffffffffu, ::kvheap::sim::detail::SourceSite site = {}) {
  ::kvheap::sim::detail::warp_collective(::kvheap::sim::detail::WarpOp::Sync, mask, 0, 0, 32, site);
}

/// \brief Bit i set when lane i of `mask` has a non-zero predicate.
inline unsigned __ballot_sync(unsigned mask, int predicate,
                              ::kvheap::sim::detail::SourceSite site = {}) {
  return static_cast<unsigned>(::kvheap::sim::detail::warp_collective(
      ::kvheap::sim::detail::WarpOp::Ballot, mask, predicate != 0, 0, 32, site));
}
/// \brief Non-zero when any lane of `mask` has a non-zero predicate.
inline int __any_sync(unsigned mask, int predicate, ::kvheap::sim::detail::SourceSite site = {}) {
  return static_cast<int>(::kvheap::sim::detail::warp_collective(
      ::kvheap::sim::detail::WarpOp::Any, mask, predicate != 0, 0, 32, site));
}
/// \brief Non-zero when every (non-exited) lane of `mask` has a non-zero predicate.
inline int __all_sync(unsigned mask, int predicate, ::kvheap::sim::detail::SourceSite site = {}) {
  return static_cast<int>(::kvheap::sim::detail::warp_collective(
      ::kvheap::sim::detail::WarpOp::All, mask, predicate != 0, 0, 32, site));
}
/// \brief Lanes of the warp that exist and have not exited (the simulator's notion of active).
inline unsigned __activemask() { return ::kvheap::sim::detail::active_mask(); }

namespace kvheap::sim::detail {

template <class T>
std::uint64_t to_bits(const T& v) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t));
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}

template <class T>
T from_bits(std::uint64_t bits) {
  T v;
  std::memcpy(static_cast<void*>(&v), &bits, sizeof(T));  // the half types are trivially copyable
  return v;
}

template <class T>
T shuffle(WarpOp op, unsigned mask, T var, int arg, int width, const detail::SourceSite& site) {
  return from_bits<T>(warp_collective(op, mask, to_bits(var), arg, width, site));
}

}  // namespace kvheap::sim::detail

// One overload per type CUDA shuffles, so arguments convert exactly as they do under nvcc.
#define KVHEAP_SIM_SHUFFLES(T)                                                                \
  inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize,              \
                       ::kvheap::sim::detail::SourceSite site = {}) {                         \
    return ::kvheap::sim::detail::shuffle(::kvheap::sim::detail::WarpOp::ShflIdx, mask, var,  \
                                          src_lane, width, site);                             \
  }                                                                                           \
  inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,         \
                          ::kvheap::sim::detail::SourceSite site = {}) {                      \
    return ::kvheap::sim::detail::shuffle(::kvheap::sim::detail::WarpOp::ShflUp, mask, var,   \
                                          static_cast<int>(delta), width, site);              \
  }                                                                                           \
  inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,       \
                            ::kvheap::sim::detail::SourceSite site = {}) {                    \
    return ::kvheap::sim::detail::shuffle(::kvheap::sim::detail::WarpOp::ShflDown, mask, var, \
                                          static_cast<int>(delta), width, site);              \
  }                                                                                           \
  inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize,         \
                           ::kvheap::sim::detail::SourceSite site = {}) {                     \
    return ::kvheap::sim::detail::shuffle(::kvheap::sim::detail::WarpOp::ShflXor, mask, var,  \
                                          lane_mask, width, site);                            \
  }

KVHEAP_SIM_SHUFFLES(int)
KVHEAP_SIM_SHUFFLES(unsigned int)
KVHEAP_SIM_SHUFFLES(long)
KVHEAP_SIM_SHUFFLES(unsigned long)
KVHEAP_SIM_SHUFFLES(long long)
KVHEAP_SIM_SHUFFLES(unsigned long long)
KVHEAP_SIM_SHUFFLES(float)
KVHEAP_SIM_SHUFFLES(double)
KVHEAP_SIM_SHUFFLES(__half)
KVHEAP_SIM_SHUFFLES(__half2)
KVHEAP_SIM_SHUFFLES(__nv_bfloat16)
KVHEAP_SIM_SHUFFLES(__nv_bfloat162)
#undef KVHEAP_SIM_SHUFFLES
