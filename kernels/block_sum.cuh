// Device-side helpers shared by the kernels of this folder: launch shapes and the block-wide sum
// reduction (warp shuffles, then one shared-memory slot per warp). For .cu files only, included
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

/// \brief Sum of `v` over the 32 lanes of the calling warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

/// \brief Sum of `v` over the block; every thread gets the result.
///
/// Every thread of the block must call it (it holds barriers), and blockDim.x must be a whole
/// number of warps. The order of additions depends only on blockDim.x, so a kernel is
/// deterministic run to run.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_sums[32];  // one per warp; 1024 threads is at most 32 warps
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int n_warps = static_cast<int>(blockDim.x) / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  // Every warp reduces the partial sums itself, so no broadcast round trip is needed.
  v = warp_sum(lane < n_warps ? warp_sums[lane] : 0.0f);
  // A second call must not overwrite warp_sums before every warp has read it.
  __syncthreads();
  return v;
}

}  // namespace kvheap::cuda::detail
