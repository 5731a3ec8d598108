// The GEMM of the device layer: C[m,n] = A[m,k] * B[n,k]^T, the shape of every projection in the
// forward pass (activations A times a weight matrix B stored [out_features, in_features]).
// cuBLAS on a GPU, Eigen in the simulator; the same call either way.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "base/dtype.hpp"

namespace kvheap {

/// \brief Owns the BLAS library state: a cuBLAS handle on a GPU, nothing in the simulator.
/// Create one per thread that issues GEMMs and keep it (creating a cuBLAS handle is slow).
class BlasHandle {
 public:
  /// \brief Creates the handle; throws ResourceError when cuBLAS cannot be initialised.
  BlasHandle();
  ~BlasHandle();  // NOLINT(performance-trivially-destructible): it frees the cuBLAS handle
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;

  /// \brief The cublasHandle_t (null in the simulator).
  [[nodiscard]] void* native() const noexcept { return handle_; }

 private:
  void* handle_ = nullptr;
};

/// \brief Sizes of C[m,n] = A[m,k] * B[n,k]^T.
struct GemmShape {
  int m = 0;  ///< rows of A and C (tokens in the batch)
  int n = 0;  ///< rows of B, columns of C (out_features)
  int k = 0;  ///< columns of A and B (in_features)
};

/// \brief C[m,n] = A[m,k] * B[n,k]^T on device memory, all row-major and densely packed.
///
/// A and B share `dtype` (fp32, fp16 or bf16); C is fp32 and is overwritten; products are
/// accumulated in fp32 (CUBLAS_COMPUTE_32F, no TF32). Runs on `stream`. Throws InputError for
/// negative sizes (and, in the simulator, for operands too small for the shape) and
/// ResourceError when cuBLAS fails.
void gemm(BlasHandle& blas, DType dtype, const void* a, const void* b, float* c, GemmShape shape,
          cudaStream_t stream = nullptr);

/// \brief gemm() for fp32 operands.
inline void gemm(BlasHandle& blas, const float* a, const float* b, float* c, GemmShape shape,
                 cudaStream_t stream = nullptr) {
  gemm(blas, DType::F32, a, b, c, shape, stream);
}
/// \brief gemm() for fp16 operands.
inline void gemm(BlasHandle& blas, const __half* a, const __half* b, float* c, GemmShape shape,
                 cudaStream_t stream = nullptr) {
  gemm(blas, DType::F16, a, b, c, shape, stream);
}
/// \brief gemm() for bf16 operands.
inline void gemm(BlasHandle& blas, const __nv_bfloat16* a, const __nv_bfloat16* b, float* c,
                 GemmShape shape, cudaStream_t stream = nullptr) {
  gemm(blas, DType::BF16, a, b, c, shape, stream);
}

namespace detail {
/// \brief Throws InputError unless m, n, k >= 0.
void check_gemm_shape(GemmShape shape);
}  // namespace detail

}  // namespace kvheap
