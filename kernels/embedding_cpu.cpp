// CPU embedding gather (the twin of embedding.cu).
#include <cstdint>
#include <cstring>
#include <limits>

#include "base/half.hpp"
#include "kernels/embedding.hpp"

namespace kvheap::cpu {

void embedding(float* x, const int* ids, const void* table, DType table_dtype, int n, int dim,
               int table_rows) {
  for (int r = 0; r < n; ++r) {
    float* dst = x + static_cast<long>(r) * dim;
    const int id = ids[r];
    if (id < 0 || id >= table_rows) {
      for (int i = 0; i < dim; ++i) dst[i] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const long offset = static_cast<long>(id) * dim;
    switch (table_dtype) {
      case DType::F32:
        std::memcpy(dst, static_cast<const float*>(table) + offset, sizeof(float) * dim);
        break;
      case DType::F16: {
        const auto* src = static_cast<const std::uint16_t*>(table) + offset;
        for (int i = 0; i < dim; ++i) dst[i] = fp16_to_float(src[i]);
        break;
      }
      case DType::BF16: {
        const auto* src = static_cast<const std::uint16_t*>(table) + offset;
        for (int i = 0; i < dim; ++i) dst[i] = bf16_to_float(src[i]);
        break;
      }
    }
  }
}

}  // namespace kvheap::cpu
