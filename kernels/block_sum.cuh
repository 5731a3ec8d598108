// Device-side helpers shared by the kernels of this folder: launch shapes and the block-wide
// reductions (warp shuffles, then one shared-memory slot per warp). For .cu files only, included
// after device/cuda_compat.hpp.
#pragma once

#include "device/cuda_compat.hpp"

namespace kvheap::cuda::detail {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;

/// \brief Threads for a one-block-per-row kernel over `width` elements: whole warps (so every
/// shuffle sees a full warp), no more than the row needs, at most `max_threads`.
inline int row_threads(long width, int max_threads) {
  const long warps = (width + kWarpSize - 1) / kWarpSize;
  const long threads = (warps < 1 ? 1 : warps) * kWarpSize;
  return static_cast<int>(threads < max_threads ? threads : max_threads);
}

/// \brief Blocks of `threads` for a grid-stride loop over `count` items.
///
/// Capped because every thread loops anyway: a few thousand blocks fill any current GPU, and a
/// smaller grid keeps the simulator from creating a fiber per element.
inline unsigned grid_stride_blocks(long count, int threads, long max_blocks = 4096) {
  const long blocks = (count + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < max_blocks ? blocks : max_blocks));
}

/// \brief `op` folded over the 32 lanes of the calling warp (a butterfly); every lane gets the
/// result.
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

/// \brief `op` folded over the block, `identity` standing in for absent warps; every thread gets
/// the result.
///
/// Every thread of the block must call it (it holds barriers), and blockDim.x must be a whole
/// number of warps. The order of the operations depends only on blockDim.x, so a kernel is
/// deterministic run to run.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity) {
  __shared__ T warp_parts[32];  // one per warp; 1024 threads is at most 32 warps
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int n_warps = static_cast<int>(blockDim.x) / kWarpSize;
  v = warp_reduce(v, op);
  if (lane == 0) warp_parts[warp] = v;
  __syncthreads();
  // Every warp reduces the partial results itself, so no broadcast round trip is needed.
  v = warp_reduce(lane < n_warps ? warp_parts[lane] : identity, op);
  // A second call must not overwrite warp_parts before every warp has read it.
  __syncthreads();
  return v;
}

struct Plus {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

struct Max {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

/// \brief Sum of `v` over the 32 lanes of the calling warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, Plus{}); }

/// \brief Sum of `v` over the block; every thread gets the result (block_reduce's rules).
__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, Plus{}, 0.0f); }

}  // namespace kvheap::cuda::detail
