// KVHEAP_HD marks functions that run on both host and device: __host__ __device__ under nvcc,
// nothing in CPU builds and in the simulator (where kernels are host code). mul_rn and fma_rn
// spell out the rounding of the attention arithmetic that must not depend on the compiler.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define KVHEAP_HD __host__ __device__ __forceinline__
#else
#define KVHEAP_HD inline
#endif

namespace kvheap {

/// \brief a * b, rounded on its own: never fused with an add that follows.
///
/// nvcc fuses a * b + c into one multiply-add wherever its optimiser pairs them (and GCC does on
/// the host), so two instantiations of one kernel body, say for two cache layouts, can round
/// differently once one of them peels or unrolls a loop the other does not. The attention code
/// states each rounding with mul_rn and fma_rn instead, and its results then depend on the
/// arithmetic written, not on the compiler's choices. (A product passed to fma_rn as its addend
/// cannot fuse either, so a plain `*` is enough there.)
KVHEAP_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  // The simulator compiles kernels with -ffp-contract=off, so a plain product stays one there.
  return a * b;
#endif
}

/// \brief a * b + c with one rounding (a fused multiply-add), on every target.
KVHEAP_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// \brief 2^x as the GPU's exponent unit computes it (ex2.approx.ftz: the instruction under
/// exp2f, without exp2f's fix-up for results below 2^-126, which it flushes to zero); exact
/// (std::exp2, flushed alike) on the host. exp2_ftz(-inf) = 0.
KVHEAP_HD float exp2_ftz(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  const float y = std::exp2(x);
  return y < 0x1p-126f ? 0.0f : y;
#endif
}

}  // namespace kvheap
