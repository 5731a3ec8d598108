// CUDA greedy argmax per row (twin: argmax_cpu.cpp): one block per row of logits.
//
// Each thread scans a strided slice keeping (value, index, saw NaN); warps then merge candidates
// through shuffles, and warp 0 merges the warps' winners from shared memory. The merge is a total
// order (larger value first, then lower index), so the result does not depend on which thread
// scanned what: ties go to the lowest index exactly as kvheap::argmax.
#include <climits>

#include "base/error.hpp"
#include "device/cuda_compat.hpp"
#include "device/launch.hpp"
#include "kernels/argmax.hpp"
#include "kernels/block_sum.cuh"

namespace kvheap::cuda {
namespace {

struct Candidate {
  float value;
  int index;
  int nan;  // 1 when the thread's slice held a NaN
};

__device__ __forceinline__ void keep_better(Candidate& best, float value, int index) {
  if (value > best.value || (value == best.value && index < best.index)) {
    best.value = value;
    best.index = index;
  }
}

__device__ __forceinline__ Candidate warp_argmax(Candidate c) {
  for (int offset = detail::kWarpSize / 2; offset > 0; offset /= 2) {
    const float value = __shfl_xor_sync(detail::kFullMask, c.value, offset);
    const int index = __shfl_xor_sync(detail::kFullMask, c.index, offset);
    c.nan |= __shfl_xor_sync(detail::kFullMask, c.nan, offset);
    keep_better(c, value, index);
  }
  return c;
}

__global__ void argmax_kernel(int* ids,             // [rows]
                              const float* logits,  // [rows, vocab]
                              int vocab) {
  __shared__ Candidate warp_best[32];
  const float* row = logits + static_cast<long>(blockIdx.x) * vocab;
  // An empty slice loses to any real entry, -inf included, through its index INT_MAX.
  Candidate c{-INFINITY, INT_MAX, 0};
  for (int i = static_cast<int>(threadIdx.x); i < vocab; i += static_cast<int>(blockDim.x)) {
    const float v = row[i];
    if (isnan(v))
      c.nan = 1;
    else
      keep_better(c, v, i);
  }
  c = warp_argmax(c);
  const int lane = static_cast<int>(threadIdx.x) % detail::kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / detail::kWarpSize;
  if (lane == 0) warp_best[warp] = c;
  __syncthreads();
  if (warp == 0) {
    const int n_warps = static_cast<int>(blockDim.x) / detail::kWarpSize;
    c = lane < n_warps ? warp_best[lane] : Candidate{-INFINITY, INT_MAX, 0};
    c = warp_argmax(c);
    if (lane == 0) ids[blockIdx.x] = c.nan ? -1 : c.index;
  }
}

}  // namespace

void argmax_rows(int* ids, const float* logits, int rows, int vocab, StreamHandle stream) {
  if (vocab < 1) throw InputError("argmax_rows: a row of logits needs at least one entry");
  if (rows <= 0) return;
  launch<argmax_kernel>(dim3(static_cast<unsigned>(rows)), dim3(detail::row_threads(vocab, 1024)),
                        0, stream, ids, logits, vocab);
}

}  // namespace kvheap::cuda
