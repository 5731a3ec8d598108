// KV write kernel: one block per batch row copies that row's K and V into its cache row, rounding
// fp32 to the KV dtype.
//
// Thread mapping: block i handles batch row i; its threads stride over the kv_dim elements, so
// both the fp32 loads and the narrow stores are coalesced. The kernel moves n * kv_dim elements per
// layer per step, a rounding error next to attention's n * n_ctx * kv_dim reads, so it stays
// scalar (any kv_dim works) instead of vectorising.
#include "device/cuda_compat.hpp"

#include "base/error.hpp"
#include "device/launch.hpp"
#include "kernels/block_sum.cuh"
#include "kernels/kv_write.hpp"

namespace kvheap::cuda {
namespace {

// Round-to-nearest-even narrowing, the same rounding as base/half.hpp.
__device__ __forceinline__ void store_kv(float* dst, float x) { *dst = x; }
__device__ __forceinline__ void store_kv(__half* dst, float x) { *dst = __float2half_rn(x); }
__device__ __forceinline__ void store_kv(__nv_bfloat16* dst, float x) {
  *dst = __float2bfloat16_rn(x);
}

/// k_cache, v_cache: [rows, kv_dim]; k, v: [n, kv_dim]; dst_rows: [n]. Grid: n blocks.
template <class T>
__global__ void kv_write_kernel(T* k_cache, T* v_cache, const float* k, const float* v,
                                const std::int64_t* dst_rows, int kv_dim) {
  const std::int64_t src = static_cast<std::int64_t>(blockIdx.x) * kv_dim;
  const std::int64_t dst = dst_rows[blockIdx.x] * kv_dim;
  for (int e = static_cast<int>(threadIdx.x); e < kv_dim; e += static_cast<int>(blockDim.x)) {
    store_kv(k_cache + dst + e, k[src + e]);
    store_kv(v_cache + dst + e, v[src + e]);
  }
}

template <class T>
void launch_kv_write(void* k_cache, void* v_cache, const float* k, const float* v,
                     const std::int64_t* dst_rows, int n, int kv_dim, StreamHandle stream) {
  // Enough warps to cover a typical kv_dim (256..1024) in a few strides, fewer for tiny models.
  const int threads = detail::row_threads(kv_dim, 256);
  launch<kv_write_kernel<T>>(dim3(static_cast<unsigned>(n)), dim3(static_cast<unsigned>(threads)),
                             0, stream, static_cast<T*>(k_cache), static_cast<T*>(v_cache), k, v,
                             dst_rows, kv_dim);
}

}  // namespace

void kv_write(DType kv, void* k_cache, void* v_cache, const float* k, const float* v,
              const std::int64_t* dst_rows, int n, int kv_dim, StreamHandle stream) {
  if (n < 0 || kv_dim <= 0)
    throw InputError("kv_write: need n >= 0 and kv_dim > 0, got n = " + std::to_string(n) +
                     ", kv_dim = " + std::to_string(kv_dim));
  if (n == 0) return;
  switch (kv) {
    case DType::F32:
      launch_kv_write<float>(k_cache, v_cache, k, v, dst_rows, n, kv_dim, stream);
      break;
    case DType::F16:
      launch_kv_write<__half>(k_cache, v_cache, k, v, dst_rows, n, kv_dim, stream);
      break;
    case DType::BF16:
      launch_kv_write<__nv_bfloat16>(k_cache, v_cache, k, v, dst_rows, n, kv_dim, stream);
      break;
  }
}

}  // namespace kvheap::cuda
