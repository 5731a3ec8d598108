// Device functions for .cu files compiled against the CPU simulator: atomics, the fast-math and
// bit intrinsics, fences, min/max, and the half-precision functions that cuda_fp16.h/cuda_bf16.h
// declare for device code only. Included by device/cuda_compat.hpp under KVHEAP_SIM.
//
// Atomics are real atomics (std::atomic_ref): blocks run on several OS threads at once. Fast-math
// intrinsics (__expf, __fdividef, ...) are computed at full precision, so a kernel whose result
// hinges on their approximation error can differ from a GPU within that error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <math.h>

#include "device/sim/thread_state.hpp"

// ---- atomics ------------------------------------------------------------------------------------

namespace kvheap::sim::detail {
template <class T, class F>
T atomic_update(T* address, F f) {  // CAS loop for the operations std::atomic_ref lacks
  std::atomic_ref<T> ref(*address);
  T old = ref.load(std::memory_order_relaxed);
  while (!ref.compare_exchange_weak(old, f(old), std::memory_order_relaxed)) {
  }
  return old;
}
}  // namespace kvheap::sim::detail

#define KVHEAP_SIM_ATOMIC_ARITH(T)                                         \
  inline T atomicAdd(T* a, T v) {                                          \
    return std::atomic_ref<T>(*a).fetch_add(v, std::memory_order_relaxed); \
  }                                                                        \
  inline T atomicExch(T* a, T v) {                                         \
    return std::atomic_ref<T>(*a).exchange(v, std::memory_order_relaxed);  \
  }
#define KVHEAP_SIM_ATOMIC_INT(T)                                                              \
  KVHEAP_SIM_ATOMIC_ARITH(T)                                                                  \
  inline T atomicSub(T* a, T v) {                                                             \
    return std::atomic_ref<T>(*a).fetch_sub(v, std::memory_order_relaxed);                    \
  }                                                                                           \
  inline T atomicAnd(T* a, T v) {                                                             \
    return std::atomic_ref<T>(*a).fetch_and(v, std::memory_order_relaxed);                    \
  }                                                                                           \
  inline T atomicOr(T* a, T v) {                                                              \
    return std::atomic_ref<T>(*a).fetch_or(v, std::memory_order_relaxed);                     \
  }                                                                                           \
  inline T atomicXor(T* a, T v) {                                                             \
    return std::atomic_ref<T>(*a).fetch_xor(v, std::memory_order_relaxed);                    \
  }                                                                                           \
  inline T atomicMax(T* a, T v) {                                                             \
    return ::kvheap::sim::detail::atomic_update(a, [v](T old) { return old < v ? v : old; }); \
  }                                                                                           \
  inline T atomicMin(T* a, T v) {                                                             \
    return ::kvheap::sim::detail::atomic_update(a, [v](T old) { return v < old ? v : old; }); \
  }                                                                                           \
  inline T atomicCAS(T* a, T compare, T v) {                                                  \
    std::atomic_ref<T>(*a).compare_exchange_strong(compare, v, std::memory_order_relaxed);    \
    return compare;                                                                           \
  }

KVHEAP_SIM_ATOMIC_INT(int)
KVHEAP_SIM_ATOMIC_INT(unsigned int)
KVHEAP_SIM_ATOMIC_INT(unsigned long long)
KVHEAP_SIM_ATOMIC_ARITH(float)
KVHEAP_SIM_ATOMIC_ARITH(double)
#undef KVHEAP_SIM_ATOMIC_INT
#undef KVHEAP_SIM_ATOMIC_ARITH

inline long long atomicMax(long long* a, long long v) {
  return ::kvheap::sim::detail::atomic_update(a, [v](long long old) { return old < v ? v : old; });
}
inline long long atomicMin(long long* a, long long v) {
  return ::kvheap::sim::detail::atomic_update(a, [v](long long old) { return v < old ? v : old; });
}
inline unsigned short atomicCAS(unsigned short* a, unsigned short compare, unsigned short v) {
  std::atomic_ref<unsigned short>(*a).compare_exchange_strong(compare, v,
                                                              std::memory_order_relaxed);
  return compare;
}
inline __half atomicAdd(__half* a, __half v) {
  return ::kvheap::sim::detail::atomic_update(a, [v](__half old) { return __hadd(old, v); });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) {
  return ::kvheap::sim::detail::atomic_update(a, [v](__nv_bfloat16 old) { return __hadd(old, v); });
}
/// \brief Atomic increment with wrap-around at `limit`, as CUDA defines it.
inline unsigned atomicInc(unsigned* a, unsigned limit) {
  return ::kvheap::sim::detail::atomic_update(
      a, [limit](unsigned old) { return old >= limit ? 0u : old + 1; });
}

// ---- fences, loads, misc ------------------------------------------------------------------------

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
inline void __nanosleep(unsigned) {}

// The asynchronous copy pipeline (cuda_pipeline_primitives.h; cp.async on sm_80 and later):
// queued per thread, landed by the waits, so a read before the wait sees stale shared memory.
inline void __pipeline_memcpy_async(void* dst_shared, const void* src_global,
                                    std::size_t size_and_align, std::size_t zfill = 0,
                                    ::kvheap::sim::detail::SourceSite site = {}) {
  ::kvheap::sim::detail::async_copy(dst_shared, src_global, size_and_align, zfill, site);
}
inline void __pipeline_commit(::kvheap::sim::detail::SourceSite site = {}) {
  ::kvheap::sim::detail::async_commit(site);
}
inline void __pipeline_wait_prior(std::size_t prior, ::kvheap::sim::detail::SourceSite site = {}) {
  ::kvheap::sim::detail::async_wait_prior(prior, site);
}
[[noreturn]] inline void __trap(::kvheap::sim::detail::SourceSite site = {}) {
  ::kvheap::sim::detail::trap(site);
}

// ---- integer min/max and bit intrinsics ---------------------------------------------------------

#define KVHEAP_SIM_MINMAX(T)                       \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
KVHEAP_SIM_MINMAX(int)
KVHEAP_SIM_MINMAX(unsigned int)
KVHEAP_SIM_MINMAX(long)
KVHEAP_SIM_MINMAX(unsigned long)
KVHEAP_SIM_MINMAX(long long)
KVHEAP_SIM_MINMAX(unsigned long long)
#undef KVHEAP_SIM_MINMAX
// CUDA's mixed-signedness overloads compare as unsigned, like the built-in conversions do.
inline unsigned min(int a, unsigned b) { return min(static_cast<unsigned>(a), b); }
inline unsigned min(unsigned a, int b) { return min(a, static_cast<unsigned>(b)); }
inline unsigned max(int a, unsigned b) { return max(static_cast<unsigned>(a), b); }
inline unsigned max(unsigned a, int b) { return max(a, static_cast<unsigned>(b)); }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double max(double a, float b) { return fmax(a, b); }

inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(int x) { return std::countl_zero(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return std::countl_zero(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1; }
inline int __ffsll(long long x) {
  return x == 0 ? 0 : std::countr_zero(static_cast<unsigned long long>(x)) + 1;
}
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }

// ---- float intrinsics (full precision here) -----------------------------------------------------

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) {
  *s = sinf(x);
  *c = cosf(x);
}
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __drcp_rn(double x) { return 1.0 / x; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
inline int __float2int_rn(float x) { return static_cast<int>(nearbyintf(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }

// ---- half-precision functions the toolkit declares for device code only ------------------------
// Computed in float and rounded once; __hfma may differ from a GPU's fused result in the last bit
// in rare double-rounding cases.

#define KVHEAP_SIM_HALF_MATH(H, TO_F, FROM_F, H2, TO_F2, FROM_F2)                    \
  inline H __hfma(H a, H b, H c) { return FROM_F(fmaf(TO_F(a), TO_F(b), TO_F(c))); } \
  inline H hsqrt(H a) { return FROM_F(sqrtf(TO_F(a))); }                             \
  inline H hrsqrt(H a) { return FROM_F(1.0f / sqrtf(TO_F(a))); }                     \
  inline H hrcp(H a) { return FROM_F(1.0f / TO_F(a)); }                              \
  inline H hexp(H a) { return FROM_F(expf(TO_F(a))); }                               \
  inline H hexp2(H a) { return FROM_F(exp2f(TO_F(a))); }                             \
  inline H hlog(H a) { return FROM_F(logf(TO_F(a))); }                               \
  inline H hsin(H a) { return FROM_F(sinf(TO_F(a))); }                               \
  inline H hcos(H a) { return FROM_F(cosf(TO_F(a))); }                               \
  inline H htanh(H a) { return FROM_F(tanhf(TO_F(a))); }                             \
  inline H2 __hfma2(H2 a, H2 b, H2 c) {                                              \
    const float2 x = TO_F2(a), y = TO_F2(b), z = TO_F2(c);                           \
    return FROM_F2(fmaf(x.x, y.x, z.x), fmaf(x.y, y.y, z.y));                        \
  }                                                                                  \
  inline H2 h2sqrt(H2 a) {                                                           \
    const float2 x = TO_F2(a);                                                       \
    return FROM_F2(sqrtf(x.x), sqrtf(x.y));                                          \
  }                                                                                  \
  inline H2 h2rsqrt(H2 a) {                                                          \
    const float2 x = TO_F2(a);                                                       \
    return FROM_F2(1.0f / sqrtf(x.x), 1.0f / sqrtf(x.y));                            \
  }                                                                                  \
  inline H2 h2exp(H2 a) {                                                            \
    const float2 x = TO_F2(a);                                                       \
    return FROM_F2(expf(x.x), expf(x.y));                                            \
  }                                                                                  \
  inline H2 h2exp2(H2 a) {                                                           \
    const float2 x = TO_F2(a);                                                       \
    return FROM_F2(exp2f(x.x), exp2f(x.y));                                          \
  }

KVHEAP_SIM_HALF_MATH(__half, __half2float, __float2half_rn, __half2, __half22float2,
                     __floats2half2_rn)
KVHEAP_SIM_HALF_MATH(__nv_bfloat16, __bfloat162float, __float2bfloat16_rn, __nv_bfloat162,
                     __bfloat1622float2, __floats2bfloat162_rn)
#undef KVHEAP_SIM_HALF_MATH

inline int __half2int_rn(__half h) { return static_cast<int>(nearbyintf(__half2float(h))); }
inline int __bfloat162int_rn(__nv_bfloat16 h) {
  return static_cast<int>(nearbyintf(__bfloat162float(h)));
}
