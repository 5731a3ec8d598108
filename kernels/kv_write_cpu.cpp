// CPU twin of the KV write: the reference the CUDA kernel must match bit for bit.
#include "kernels/kv_write.hpp"

#include "kernels/kv_types.hpp"

namespace kvheap::cpu {
namespace {

template <class T>
void write_rows(T* k_cache, T* v_cache, const float* k, const float* v,
                const std::int64_t* dst_rows, int n, int kv_dim) {
  for (int i = 0; i < n; ++i) {
    T* kd = k_cache + dst_rows[i] * kv_dim;
    T* vd = v_cache + dst_rows[i] * kv_dim;
    const float* ks = k + static_cast<std::int64_t>(i) * kv_dim;
    const float* vs = v + static_cast<std::int64_t>(i) * kv_dim;
    for (int e = 0; e < kv_dim; ++e) {
      from_float(ks[e], kd[e]);
      from_float(vs[e], vd[e]);
    }
  }
}

}  // namespace

void kv_write(DType kv, void* k_cache, void* v_cache, const float* k, const float* v,
              const std::int64_t* dst_rows, int n, int kv_dim) {
  switch (kv) {
    case DType::F32:
      write_rows(static_cast<float*>(k_cache), static_cast<float*>(v_cache), k, v, dst_rows, n,
                 kv_dim);
      break;
    case DType::F16:
      write_rows(static_cast<F16Bits*>(k_cache), static_cast<F16Bits*>(v_cache), k, v, dst_rows, n,
                 kv_dim);
      break;
    case DType::BF16:
      write_rows(static_cast<BF16Bits*>(k_cache), static_cast<BF16Bits*>(v_cache), k, v, dst_rows,
                 n, kv_dim);
      break;
  }
}

}  // namespace kvheap::cpu
