// CUDA per-head q/k RMSNorm (twin: qk_norm_cpu.cpp): one warp per head, grid-stride over the
// heads of q and then of k.
//
// A head (128 floats in Qwen3) is too short to give a block of its own (as rmsnorm.cu gives each
// row) enough work: a warp reads it in a few coalesced passes, sums the squares with shuffles and
// no shared memory, and scales its own elements. Decode has few rows, so q and k share a launch.
#include "device/cuda_compat.hpp"
#include "device/launch.hpp"
#include "kernels/block_sum.cuh"
#include "kernels/qk_norm.hpp"

namespace kvheap::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// Heads 0..q_heads-1 are q's, the rest k's. The loop bound depends only on the warp's index, so
// every lane of a warp runs the same iterations and each shuffle sees the whole warp.
__global__ void qk_norm_heads(float* q,             // [q_heads, head_dim]
                              float* k,             // [total_heads - q_heads, head_dim]
                              const float* q_gain,  // [head_dim]
                              const float* k_gain,  // [head_dim]
                              long q_heads, long total_heads, int head_dim, float eps) {
  const int lane = static_cast<int>(threadIdx.x) % detail::kWarpSize;
  const long warps_per_block = static_cast<long>(blockDim.x) / detail::kWarpSize;
  const long first = static_cast<long>(blockIdx.x) * warps_per_block +
                     static_cast<long>(threadIdx.x) / detail::kWarpSize;
  const long stride = static_cast<long>(gridDim.x) * warps_per_block;
  for (long h = first; h < total_heads; h += stride) {
    const bool is_q = h < q_heads;
    float* x = is_q ? q + h * head_dim : k + (h - q_heads) * head_dim;
    const float* gain = is_q ? q_gain : k_gain;
    float ss = 0.0f;
    for (int i = lane; i < head_dim; i += detail::kWarpSize) ss += x[i] * x[i];
    ss = detail::warp_sum(ss);
    // 1 / sqrtf rather than rsqrtf, as in rmsnorm.cu: a few ulps closer to the twin for free.
    const float scale = 1.0f / sqrtf(ss / static_cast<float>(head_dim) + eps);
    for (int i = lane; i < head_dim; i += detail::kWarpSize) x[i] = x[i] * scale * gain[i];
  }
}

}  // namespace

void qk_norm(float* q, float* k, const float* q_gain, const float* k_gain, int n, int n_heads,
             int n_kv_heads, int head_dim, float eps, StreamHandle stream) {
  const long q_heads = static_cast<long>(n) * n_heads;
  const long total = q_heads + static_cast<long>(n) * n_kv_heads;
  if (total <= 0 || head_dim <= 0) return;  // a grid of zero blocks is an invalid launch
  launch<qk_norm_heads>(dim3(detail::grid_stride_blocks(total, kWarpsPerBlock)),
                        dim3(kWarpsPerBlock * detail::kWarpSize), 0, stream, q, k, q_gain, k_gain,
                        q_heads, total, head_dim, eps);
}

}  // namespace kvheap::cuda
