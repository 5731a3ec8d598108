// CUDA RoPE (twin: rope_cpu.cpp): one thread per (row, head, rotated pair), grid-stride.
//
// The twin computes each angle once per (row, pair) and loops over heads; here every head's
// thread recomputes it, which gives decode (one row) enough threads to fill the device. The angle
// is the same fp32 product float(pos) * inv_freq[i], and cosf/sinf are the full-precision
// functions (not __cosf/__sinf, whose error grows with the angle: positions reach thousands of
// radians), so results match the twin to a few ulps.
#include "device/cuda_compat.hpp"
#include "device/launch.hpp"
#include "kernels/block_sum.cuh"
#include "kernels/rope.hpp"

namespace kvheap::cuda {
namespace {

__global__ void rope_pairs(float* x,               // [n, n_heads, head_dim]
                           const int* pos,         // [n]
                           const float* inv_freq,  // [head_dim / 2]
                           int n, int n_heads, int head_dim, bool interleaved) {
  const int half = head_dim / 2;
  const long total = static_cast<long>(n) * n_heads * half;
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  for (long t = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int i = static_cast<int>(t % half);
    const long row_head = t / half;  // row * n_heads + head
    const long row = row_head / n_heads;
    const float angle = static_cast<float>(pos[row]) * inv_freq[i];
    const float c = cosf(angle);
    const float s = sinf(angle);
    float* head = x + row_head * head_dim;
    const int a = interleaved ? 2 * i : i;
    const int b = interleaved ? 2 * i + 1 : i + half;
    const float x0 = head[a];
    const float x1 = head[b];
    head[a] = x0 * c - x1 * s;
    head[b] = x0 * s + x1 * c;
  }
}

}  // namespace

void rope(float* x, const int* pos, int n, int n_heads, int head_dim, const float* inv_freq,
          bool interleaved, StreamHandle stream) {
  const long total = static_cast<long>(n) * n_heads * (head_dim / 2);
  if (total <= 0) return;
  constexpr int kThreads = 256;
  launch<rope_pairs>(dim3(detail::grid_stride_blocks(total, kThreads)), dim3(kThreads), 0, stream,
                     x, pos, inv_freq, n, n_heads, head_dim, interleaved);
}

}  // namespace kvheap::cuda
