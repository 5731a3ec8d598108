// gemm() on a GPU with cuBLAS (KVHEAP_CUDA=real).
//
// cuBLAS is column-major. A row-major X[r,c] is the column-major X^T, so the row-major
// C[m,n] = A B^T is the column-major C^T[n,m] = B A^T: cuBLAS computes it with op(B) = T on B's
// buffer (a column-major [k,n]) and op(A) = N on A's buffer (a column-major [k,m]).
#include <cublas_v2.h>

#include <string>

#include "device/device.hpp"
#include "device/gemm.hpp"

namespace kvheap {
namespace {

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw ResourceError(std::string(what) + " failed: " + cublasGetStatusString(status));
  }
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

}  // namespace

BlasHandle::BlasHandle() {
  cublasHandle_t h = nullptr;
  check(cublasCreate(&h), "cublasCreate");
  handle_ = h;
  // CUBLAS_DEFAULT_MATH keeps fp32 GEMMs in fp32 (no TF32), matching the CPU reference.
  check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

BlasHandle::~BlasHandle() {
  if (handle_ != nullptr) (void)cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

void gemm(BlasHandle& blas, DType dtype, const void* a, const void* b, float* c, GemmShape shape,
          cudaStream_t stream) {
  detail::check_gemm_shape(shape);
  const auto [m, n, k] = shape;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: C = 0
    KVHEAP_CUDA_CHECK(cudaMemsetAsync(c, 0, sizeof(float) * m * n, stream));
    return;
  }
  auto h = static_cast<cublasHandle_t>(blas.native());
  check(cublasSetStream(h, stream), "cublasSetStream");
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const cudaDataType_t t = cuda_type(dtype);
  check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, b, t, k, a, t, k, &beta, c,
                     CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

}  // namespace kvheap
