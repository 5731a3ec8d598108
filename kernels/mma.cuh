// Tensor-core products for kernels: one warp-wide mma.sync.m16n8k16 with 16-bit inputs (fp16 or
// bf16) and fp32 accumulators, ldmatrix to load B fragments from shared memory, and the packing
// of two fp32 values into one input register.
//
// The fragment layout is the PTX ISA's for m16n8k16 (lane = 4 groupID + t):
//   A, 16 x 16, row-major, 4 registers of 2 elements (the lower column in the low half):
//     a[0]: row groupID,     columns 2t, 2t+1      a[2]: row groupID,     columns 2t+8, 2t+9
//     a[1]: row groupID + 8, columns 2t, 2t+1      a[3]: row groupID + 8, columns 2t+8, 2t+9
//   B, 16 x 8 (k x n), 2 registers:
//     b[0]: rows 2t, 2t+1 of column groupID        b[1]: rows 2t+8, 2t+9 of column groupID
//   D, 16 x 8 fp32: d[0], d[1]: row groupID, columns 2t, 2t+1; d[2], d[3]: row groupID + 8.
// So a lane's accumulators of two n-tiles side by side are exactly its A registers of the next
// product over those 16 columns (the score tile S becomes the weight tile P with no shuffle).
//
// On a GPU of compute capability 8.0 or later these are the mma.sync and ldmatrix instructions.
// The simulator runs each as a warp collective of all 32 lanes whose last arrival does the whole
// warp's work from every lane's operands (device/sim/sync.cpp): kernels index fragments directly,
// so the twins keep the documented layouts rather than invented ones.
#pragma once

#include "device/cuda_compat.hpp"

#include <type_traits>

namespace kvheap::cuda::detail {

/// \brief Two fp32 values rounded to T (__half or __nv_bfloat16) in one register, `lo` in the
/// low half: the element of the lower index of a fragment pair.
template <class T>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return static_cast<unsigned>(__half_as_ushort(h.x)) |
           static_cast<unsigned>(__half_as_ushort(h.y)) << 16;
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return static_cast<unsigned>(__bfloat16_as_ushort(h.x)) |
           static_cast<unsigned>(__bfloat16_as_ushort(h.y)) << 16;
  }
}

/// \brief The fp32 value of the low (hi = false) or high half of a register of T elements.
template <class T>
__device__ __forceinline__ float unpack(unsigned r, bool hi) {
  const auto bits = static_cast<unsigned short>(hi ? r >> 16 : r & 0xffffu);
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(__ushort_as_half(bits));
  } else {
    return __uint_as_float(static_cast<unsigned>(bits) << 16);
  }
}

/// \brief d += a b over one 16 x 8 x 16 tile; every lane of the warp must call it together
/// (mma.sync.aligned). T: __half or __nv_bfloat16.
#if defined(KVHEAP_SIM)
template <class T>
inline void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                      ::kvheap::sim::detail::SourceSite site = {}) {
  const ::kvheap::sim::detail::MmaLane lane{std::is_same_v<T, __half>
                                                ? ::kvheap::sim::detail::MmaType::F16
                                                : ::kvheap::sim::detail::MmaType::BF16,
                                            a, b, d};
  ::kvheap::sim::detail::mma_m16n8k16(lane, site);
}
#else
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4],
                                          const unsigned (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // no such instruction before sm_80: the host never launches this path there
#endif
}
#endif

/// \brief ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: four 8 x 8 matrices of 16-bit elements
/// from shared memory into fragments. Lane 8j + r passes the address of row r of matrix j (16
/// bytes, 16-byte aligned); register j of lane l receives two elements of matrix j: of row l / 4,
/// columns 2 (l % 4) and 2 (l % 4) + 1 (the lower in the low half), or with kTrans those of column
/// l / 4, rows 2 (l % 4) and 2 (l % 4) + 1. Every lane of the warp must call it together.
///   - An 8 x 8 block of K (rows: positions, columns: dims) without kTrans is the B fragment
///     register of Q Kᵀ for those 8 positions and 8 dims (k = dims).
///   - An 8 x 8 block of V (rows: positions, columns: dims) with kTrans is the B fragment register
///     of P V for those 8 positions (k) and 8 dims (n).
#if defined(KVHEAP_SIM)
template <bool kTrans>
inline void ldmatrix_x4(unsigned (&r)[4], const void* row,
                        ::kvheap::sim::detail::SourceSite site = {}) {
  ::kvheap::sim::detail::ldmatrix_x4(::kvheap::sim::detail::LdmatrixLane{row, r, kTrans}, site);
}
#else
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // the kernels that use it run from sm_80 on only
#endif
}
#endif

}  // namespace kvheap::cuda::detail
