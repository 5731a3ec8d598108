// The glue around a half-precision GEMM: narrowing fp32 activations to the weights' dtype before
// the product, and adding a bias (Qwen2's q/k/v) to its fp32 result.
#pragma once

#include "base/dtype.hpp"
#include "kernels/cuda_stream.hpp"

namespace kvheap::cpu {

/// \brief out[count] = in[count] converted to `out_dtype`, rounding to nearest even
/// (base/half.hpp); fp32 is a plain copy.
/// \param out [count] float, or raw fp16/bf16 bits (uint16)
/// \param in  [count] fp32
void cast_from_f32(void* out, DType out_dtype, const float* in, long count);

}  // namespace kvheap::cpu

namespace kvheap::cuda {

/// \brief CUDA twin of cpu::cast_from_f32 on device memory (cast.cu): __float2half_rn and
/// __float2bfloat16_rn round to nearest even, so results equal the host conversion bit for bit.
/// \param out [count] of `out_dtype` (float, __half or __nv_bfloat16)
/// \param in  [count] fp32
void cast_from_f32(void* out, DType out_dtype, const float* in, long count,
                   StreamHandle stream = nullptr);

/// \brief CUDA twin of cpu::add_bias (matmul.hpp): out[n, dim] += bias[dim] broadcast over rows;
/// a no-op when bias is null.
/// \param out  [n, dim]
/// \param bias [dim] or null
void add_bias(float* out, const float* bias, int n, int dim, StreamHandle stream = nullptr);

}  // namespace kvheap::cuda
