// CUDA embedding gather (twin: embedding_cpu.cpp): one block per output row, threads striding
// over the row so that consecutive threads read consecutive elements (coalesced).
#include "device/cuda_compat.hpp"

#include "base/error.hpp"
#include "device/launch.hpp"
#include "kernels/block_sum.cuh"
#include "kernels/embedding.hpp"

namespace kvheap::cuda {
namespace {

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__global__ void gather(float* x,        // [n, dim]
                       const int* ids,  // [n]
                       const T* table,  // [table_rows, dim]
                       int dim, int table_rows) {
  const long row = blockIdx.x;
  float* dst = x + row * dim;
  const int id = ids[row];
  if (id < 0 || id >= table_rows) {
    // Quiet NaN: a bad id the caller failed to reject poisons its row instead of reading
    // outside the table. No barrier follows, so the whole block may take this branch.
    for (int i = static_cast<int>(threadIdx.x); i < dim; i += static_cast<int>(blockDim.x))
      dst[i] = __int_as_float(0x7fc00000);
    return;
  }
  const T* src = table + static_cast<long>(id) * dim;
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += static_cast<int>(blockDim.x))
    dst[i] = widen(src[i]);
}

template <class T>
void run(float* x, const int* ids, const void* table, int n, int dim, int table_rows,
         StreamHandle stream) {
  launch<gather<T>>(dim3(static_cast<unsigned>(n)), dim3(detail::row_threads(dim, 256)), 0, stream,
                    x, ids, static_cast<const T*>(table), dim, table_rows);
}

}  // namespace

void embedding(float* x, const int* ids, const void* table, DType table_dtype, int n, int dim,
               int table_rows, StreamHandle stream) {
  if (n <= 0 || dim <= 0) return;  // a grid of zero blocks is an invalid launch
  switch (table_dtype) {
    case DType::F32: run<float>(x, ids, table, n, dim, table_rows, stream); return;
    case DType::F16: run<__half>(x, ids, table, n, dim, table_rows, stream); return;
    case DType::BF16: run<__nv_bfloat16>(x, ids, table, n, dim, table_rows, stream); return;
  }
  throw InputError("embedding: unknown table dtype");
}

}  // namespace kvheap::cuda
