// CUDA narrowing of fp32 to fp16/bf16 and bias add (twins: cast_cpu.cpp, cpu::add_bias in
// matmul_cpu.cpp). Both run around a GEMM: the cast before a half-precision one (cuBLAS wants A
// and B in the same dtype), the bias after, on its fp32 output. Element-wise and grid-stride.
#include "device/cuda_compat.hpp"

#include "base/error.hpp"
#include "device/launch.hpp"
#include "kernels/block_sum.cuh"
#include "kernels/cast.hpp"

namespace kvheap::cuda {
namespace {

// Both intrinsics round to nearest, ties to even, like float_to_fp16/float_to_bf16 on the host.
__device__ __forceinline__ void narrow(float v, __half& out) { out = __float2half_rn(v); }
__device__ __forceinline__ void narrow(float v, __nv_bfloat16& out) {
  out = __float2bfloat16_rn(v);
}

template <class T>
__global__ void cast_kernel(T* out,           // [count]
                            const float* in,  // [count]
                            long count) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    narrow(in[i], out[i]);
}

__global__ void add_bias_kernel(float* out,         // [n, dim]
                                const float* bias,  // [dim]
                                int dim, long count) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    out[i] += bias[i % dim];
}

constexpr int kThreads = 256;

template <class T>
void run_cast(void* out, const float* in, long count, StreamHandle stream) {
  launch<cast_kernel<T>>(dim3(detail::grid_stride_blocks(count, kThreads)), dim3(kThreads), 0,
                         stream, static_cast<T*>(out), in, count);
}

}  // namespace

void cast_from_f32(void* out, DType out_dtype, const float* in, long count, StreamHandle stream) {
  if (count <= 0) return;
  switch (out_dtype) {
    case DType::F32:
      KVHEAP_CUDA_CHECK(cudaMemcpyAsync(out, in, sizeof(float) * static_cast<std::size_t>(count),
                                        cudaMemcpyDeviceToDevice, stream));
      return;
    case DType::F16: run_cast<__half>(out, in, count, stream); return;
    case DType::BF16: run_cast<__nv_bfloat16>(out, in, count, stream); return;
  }
  throw InputError("cast_from_f32: unknown output dtype");
}

void add_bias(float* out, const float* bias, int n, int dim, StreamHandle stream) {
  const long count = static_cast<long>(n) * dim;
  if (bias == nullptr || count <= 0) return;
  launch<add_bias_kernel>(dim3(detail::grid_stride_blocks(count, kThreads)), dim3(kThreads), 0,
                          stream, out, bias, dim, count);
}

}  // namespace kvheap::cuda
