// Explicit instantiations of the CPU attention for the contiguous layout, so that the template is
// compiled (and warned about) once even before a chapter uses it.
#include "kernels/decode_attention_cpu.hpp"

namespace kvheap::cpu {

#define KVHEAP_INSTANTIATE_ATTEND(T)                   \
  template void attend_kv_heads<T, ContiguousRows<T>>( \
      const float*, const ContiguousRows<T>&, int, const AttendShape&, int, int, float*, float*);
KVHEAP_INSTANTIATE_ATTEND(float)
KVHEAP_INSTANTIATE_ATTEND(F16Bits)
KVHEAP_INSTANTIATE_ATTEND(BF16Bits)
#undef KVHEAP_INSTANTIATE_ATTEND

}  // namespace kvheap::cpu
