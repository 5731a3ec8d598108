// Causal grouped-query attention of query rows over cached K/V rows (CPU twin).
//
// The cache layout is hidden behind a row accessor so that every policy (contiguous reservation,
// paged blocks, shared prefixes) runs the same arithmetic in the same order; only where a
// position's K and V rows live differs. That is what makes paged results bitwise equal to
// contiguous ones on the same device.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/half.hpp"
#include "common/model_config.hpp"

namespace kvheap::cpu {

/// \brief Storage element of the KV cache: float, or raw fp16/bf16 bits.
struct F16Bits {
  std::uint16_t bits;  ///< IEEE binary16 bit pattern
};
/// \brief bf16 bits stored in the KV cache.
struct BF16Bits {
  std::uint16_t bits;  ///< bfloat16 bit pattern (the top half of an fp32)
};

/// \brief Widens a stored KV element to fp32.
inline float to_float(float v) { return v; }
/// \copydoc to_float(float)
inline float to_float(F16Bits v) { return fp16_to_float(v.bits); }
/// \copydoc to_float(float)
inline float to_float(BF16Bits v) { return bf16_to_float(v.bits); }
/// \brief Rounds fp32 to the KV storage type (round to nearest even).
inline void from_float(float x, float& out) { out = x; }
/// \copydoc from_float(float, float&)
inline void from_float(float x, F16Bits& out) { out.bits = float_to_fp16(x); }
/// \copydoc from_float(float, float&)
inline void from_float(float x, BF16Bits& out) { out.bits = float_to_bf16(x); }

/// \brief Calls `f(T{})` with T the storage element of KV dtype `t` (float, F16Bits or BF16Bits),
/// so a cache policy writes its type-generic code once.
template <class F>
void with_kv_type(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::F16: f(F16Bits{}); break;
    case DType::BF16: f(BF16Bits{}); break;
  }
}

/// \brief Attention of one query row over positions [0, n_ctx) for one KV head's query group.
///
/// \param q       [group, head_dim] the query heads that share KV head `kv_head`
/// \param rows    accessor: rows.k(t) and rows.v(t) point at position t's [n_kv_heads, head_dim]
/// \param out     [group, head_dim] written
/// \param scores  [group, n_ctx] scratch
///
/// Each K and V row is read once for the whole group (grouped-query aware). Scores, softmax and
/// the weighted sum are fp32; the softmax sum and the weighted sum accumulate over positions in
/// increasing order, and each dot product is a SIMD reduction over head_dim.
template <class T, class Rows>
void attend_group(const float* q, const Rows& rows, int n_ctx, int kv_head, int group, int head_dim,
                  float* out, float* scores) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int t = 0; t < n_ctx; ++t) {
    const T* k = rows.k(t) + static_cast<long>(kv_head) * head_dim;
    for (int h = 0; h < group; ++h) {
      const float* qh = q + h * head_dim;
      float dot = 0.0f;
      // A SIMD reduction (lanes summed at the end) lets the loop stream K at memory speed; its
      // order is fixed for a given build, so every layout that calls this stays bitwise equal.
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < head_dim; ++d) dot += qh[d] * to_float(k[d]);
      scores[static_cast<long>(h) * n_ctx + t] = dot * scale;
    }
  }
  for (int h = 0; h < group; ++h) {
    float* s = scores + static_cast<long>(h) * n_ctx;
    float m = s[0];
    for (int t = 1; t < n_ctx; ++t) m = s[t] > m ? s[t] : m;
    float sum = 0.0f;
    for (int t = 0; t < n_ctx; ++t) {
      s[t] = std::exp(s[t] - m);
      sum += s[t];
    }
    const float inv = 1.0f / sum;
    for (int t = 0; t < n_ctx; ++t) s[t] *= inv;
  }
  for (int i = 0; i < group * head_dim; ++i) out[i] = 0.0f;
  for (int t = 0; t < n_ctx; ++t) {
    const T* v = rows.v(t) + static_cast<long>(kv_head) * head_dim;
    for (int h = 0; h < group; ++h) {
      const float p = scores[static_cast<long>(h) * n_ctx + t];
      float* oh = out + h * head_dim;
      for (int d = 0; d < head_dim; ++d) oh[d] += p * to_float(v[d]);
    }
  }
}

/// \brief Row accessor for one sequence stored contiguously: position t at base + t * stride.
template <class T>
struct ContiguousRows {
  const T* k_base;  ///< [n_ctx, n_kv_heads, head_dim] with row stride `stride`
  const T* v_base;  ///< same layout as k_base
  long stride;      ///< elements between consecutive positions
  /// \brief Position t's K row.
  const T* k(int t) const { return k_base + t * stride; }
  /// \brief Position t's V row.
  const T* v(int t) const { return v_base + t * stride; }
};

}  // namespace kvheap::cpu
