// CUDA SwiGLU and residual add (twin: swiglu_cpu.cpp): element-wise, grid-stride.
//
// Both are pure bandwidth, so the main loop moves 16 bytes per load (float4) when every pointer
// is 16-byte aligned, and a scalar loop finishes the last count % 4 elements (or all of them for
// unaligned views). silu uses expf, not __expf, to stay within a few ulps of the twin.
#include <cstdint>

#include "device/cuda_compat.hpp"
#include "device/launch.hpp"
#include "kernels/block_sum.cuh"
#include "kernels/swiglu.hpp"

namespace kvheap::cuda {
namespace {

struct SiluMul {
  __device__ __forceinline__ float operator()(float g, float u) const {
    return g / (1.0f + expf(-g)) * u;
  }
};
struct Add {
  __device__ __forceinline__ float operator()(float x, float d) const { return x + d; }
};

// x[i] = op(x[i], y[i]) for i < count; the first `vec_count` float4s go through vector loads.
template <class Op>
__global__ void elementwise(float* x,        // [count]
                            const float* y,  // [count]
                            long count, long vec_count) {
  const Op op{};
  const long start = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  auto* x4 = reinterpret_cast<float4*>(x);
  const auto* y4 = reinterpret_cast<const float4*>(y);
  for (long i = start; i < vec_count; i += stride) {
    float4 a = x4[i];
    const float4 b = y4[i];
    a.x = op(a.x, b.x);
    a.y = op(a.y, b.y);
    a.z = op(a.z, b.z);
    a.w = op(a.w, b.w);
    x4[i] = a;
  }
  for (long i = vec_count * 4 + start; i < count; i += stride) x[i] = op(x[i], y[i]);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <class Op>
void run(float* x, const float* y, long count, StreamHandle stream) {
  if (count <= 0) return;
  const long vec_count = aligned16(x) && aligned16(y) ? count / 4 : 0;
  constexpr int kThreads = 256;
  const long items = vec_count > 0 ? vec_count : count;
  launch<elementwise<Op>>(dim3(detail::grid_stride_blocks(items, kThreads)), dim3(kThreads), 0,
                          stream, x, y, count, vec_count);
}

}  // namespace

void swiglu(float* gate, const float* up, long count, StreamHandle stream) {
  run<SiluMul>(gate, up, count, stream);
}

void residual_add(float* x, const float* delta, long count, StreamHandle stream) {
  run<Add>(x, delta, count, stream);
}

}  // namespace kvheap::cuda
