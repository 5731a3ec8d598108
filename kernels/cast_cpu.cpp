// CPU narrowing of fp32 to fp16/bf16 (the twin of cast.cu's cast kernel; the twin of its bias
// kernel is cpu::add_bias in matmul_cpu.cpp).
#include <cstdint>
#include <cstring>

#include "base/half.hpp"
#include "kernels/cast.hpp"

namespace kvheap::cpu {

void cast_from_f32(void* out, DType out_dtype, const float* in, long count) {
  switch (out_dtype) {
    case DType::F32: std::memcpy(out, in, sizeof(float) * static_cast<std::size_t>(count)); break;
    case DType::F16: {
      auto* dst = static_cast<std::uint16_t*>(out);
      for (long i = 0; i < count; ++i) dst[i] = float_to_fp16(in[i]);
      break;
    }
    case DType::BF16: {
      auto* dst = static_cast<std::uint16_t*>(out);
      for (long i = 0; i < count; ++i) dst[i] = float_to_bf16(in[i]);
      break;
    }
  }
}

}  // namespace kvheap::cpu
