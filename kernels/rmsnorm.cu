// CUDA RMSNorm (twin: rmsnorm_cpu.cpp): one block per row.
//
// Each thread sums the squares of a strided slice of the row, the block adds the partial sums
// (warp shuffles, then shared memory), and every thread scales its own slice. A row is read
// twice; for the widths of these models it stays in L1/L2 between the passes.
#include "device/cuda_compat.hpp"
#include "device/launch.hpp"
#include "kernels/block_sum.cuh"
#include "kernels/rmsnorm.hpp"

namespace kvheap::cuda {
namespace {

// out and x may alias: every element is read before it is written, by the same thread.
__global__ void rmsnorm_rows(float* out,           // [n, dim]
                             const float* x,       // [n, dim]
                             const float* weight,  // [dim]
                             int dim, float eps) {
  const long row = blockIdx.x;
  const float* xr = x + row * dim;
  float* yr = out + row * dim;
  float ss = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += static_cast<int>(blockDim.x))
    ss += xr[i] * xr[i];
  ss = detail::block_sum(ss);
  // 1 / sqrtf rather than rsqrtf: the approximate reciprocal square root would cost the CPU
  // comparison several ulps for no measurable speed in a memory-bound kernel.
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += static_cast<int>(blockDim.x))
    yr[i] = xr[i] * scale * weight[i];
}

}  // namespace

void rmsnorm(float* out, const float* x, const float* weight, int n, int dim, float eps,
             StreamHandle stream) {
  if (n <= 0 || dim <= 0) return;  // a grid of zero blocks is an invalid launch
  launch<rmsnorm_rows>(dim3(static_cast<unsigned>(n)), dim3(detail::row_threads(dim, 256)), 0,
                       stream, out, x, weight, dim, eps);
}

}  // namespace kvheap::cuda
