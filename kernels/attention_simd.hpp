// The inner loops of the CPU attention twin (kernels/attention.hpp), written on 8-float vectors.
//
// Decode attention does about two multiply-adds per byte of cache it reads, so on a CPU the
// loops must run near the multiply-add peak just to keep up with memory. Three habits get them
// there: blocks of accumulators small enough to live in registers yet many enough to hide the
// multiply-add latency; every loaded row reused by two query heads; and horizontal sums done
// eight at a time by a transpose, not one lane at a time.
//
// Every reduction here has an order fixed by head_dim alone: a dot product keeps lane d % 8 for
// element d and adds the eight lanes pairwise, whichever block computed it; an output element
// accumulates a tile's rows in the order it is handed them. Any caller that hands in the same
// numbers in the same order gets bitwise the same result, whatever the layout, the blocking or
// the thread.
#pragma once

#include <Eigen/Core>
#if defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/kv_types.hpp"

namespace kvheap::cpu::simd {

/// \brief Lanes of Vec8: partial sums per dot product.
inline constexpr int kLanes = 8;

/// \brief Eight floats as one value. GCC and Clang lower it to the target's vector registers (one
/// AVX register, two SSE or NEON ones), which pins the lane structure the reductions rely on;
/// left alone, the auto-vectoriser may vectorise across positions with gathers instead.
using Vec8 = float __attribute__((vector_size(kLanes * sizeof(float))));

/// \brief Unaligned load of 8 floats.
inline Vec8 load8(const float* p) {
  Vec8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
/// \brief 8 stored bf16 values widened to fp32 (exact: bf16 is the top half of an fp32).
///
/// On x86 with AVX2 this is two instructions, spelled out because some compilers' tuning splits
/// the generic form into six.
inline Vec8 load8(const BF16Bits* p) {
#if defined(__AVX2__)
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return reinterpret_cast<Vec8>(
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16)));
#else
  using U16x8 = std::uint16_t __attribute__((vector_size(8 * sizeof(std::uint16_t))));
  using U32x8 = std::uint32_t __attribute__((vector_size(8 * sizeof(std::uint32_t))));
  U16x8 bits;
  std::memcpy(&bits, p, sizeof bits);
  const U32x8 wide = __builtin_convertvector(bits, U32x8) << 16;
  Vec8 v;
  std::memcpy(&v, &wide, sizeof v);
  return v;
#endif
}
/// \brief 8 stored fp16 values widened to fp32 (exact), with the F16C instruction where the
/// target has it.
inline Vec8 load8(const F16Bits* p) {
#if defined(__F16C__)
  return reinterpret_cast<Vec8>(
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#else
  Vec8 v;
  for (int l = 0; l < kLanes; ++l) v[l] = to_float(p[l]);
  return v;
#endif
}
/// \brief One stored element widened to fp32.
inline float load1(const float* p) { return *p; }
/// \copydoc load1(const float*)
inline float load1(const BF16Bits* p) { return to_float(*p); }
/// \copydoc load1(const float*)
inline float load1(const F16Bits* p) { return to_float(*p); }
/// \brief Unaligned store of 8 floats.
inline void store8(float* p, Vec8 v) { std::memcpy(p, &v, sizeof v); }

/// \brief v, kept in a register: each loaded vector is used by several multiply-adds, and some
/// compilers' cost models (GCC's for AMD Zen, for one) would rather reload it for every use,
/// which doubles the loads of the inner loops and halves their speed.
inline Vec8 in_register(Vec8 v) {
#if defined(__x86_64__) && defined(__AVX__)
  __asm__("" : "+v"(v));  // an empty instruction that "changes" v: the compiler must keep it
#endif
  return v;
}

/// \brief ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)): the order every dot product uses.
inline float sum8(Vec8 a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/// \brief [a0+a1, a2+a3, a4+a5, a6+a7, b0+b1, b2+b3, b4+b5, b6+b7].
inline Vec8 pair_sums(Vec8 a, Vec8 b) {
  return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14) +
         __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
}

/// \brief Lane i is sum8(a[i]), bit for bit: three rounds of pair_sums add exactly the pairs
/// sum8 adds, for eight vectors at once.
inline Vec8 sum8_each(const Vec8* a) {
  return pair_sums(pair_sums(pair_sums(a[0], a[1]), pair_sums(a[2], a[3])),
                   pair_sums(pair_sums(a[4], a[5]), pair_sums(a[6], a[7])));
}

/// \brief Vector accumulators a score block keeps: 16 where the target has 32 vector registers
/// (AVX-512), so that a block covers four heads by four rows and each loaded query vector serves
/// four rows; else 8, which with the loaded operands still fits in 16 registers.
#if defined(__AVX512VL__)
inline constexpr int kScoreAccumulators = 16;
#else
inline constexpr int kScoreAccumulators = kLanes;
#endif

/// \brief Dot products of kHeads query heads with kPos rows: lane j of out[i] is the product
/// numbered 8 i + j, product h * kPos + p being q_h . k[p] (kHeads * kPos = 8 or 16).
///
/// \param q  [kHeads, head_dim] query heads, consecutive
/// \param k  kPos row pointers, each [head_dim] as stored (fp32, bf16 or fp16)
/// Each loaded K vector serves kHeads heads and each loaded query vector kPos rows; the
/// accumulators hide the multiply-add latency. Rows are widened as they are loaded: widening into
/// a buffer first would store twice the bytes the cache holds, and those stores slow the stream
/// of loads from memory.
template <int kHeads, int kPos, class T>
void dot_block(const float* q, const T* const* k, int head_dim, Vec8* out) {
  constexpr int kN = kHeads * kPos;
  static_assert(kN % kLanes == 0, "each transpose sums exactly eight dot products");
  Vec8 acc[kN] = {};
  const int body = head_dim - head_dim % kLanes;
  for (int d = 0; d < body; d += kLanes) {
    Vec8 qv[kHeads];
    for (int h = 0; h < kHeads; ++h)
      qv[h] = in_register(load8(q + static_cast<long>(h) * head_dim + d));
    for (int p = 0; p < kPos; ++p) {
      const Vec8 kv = in_register(load8(k[p] + d));
      for (int h = 0; h < kHeads; ++h) acc[h * kPos + p] += qv[h] * kv;
    }
  }
  for (int d = body; d < head_dim; ++d)  // head_dim not a multiple of 8: lane d - body
    for (int h = 0; h < kHeads; ++h)
      for (int p = 0; p < kPos; ++p)
        acc[h * kPos + p][d - body] += q[static_cast<long>(h) * head_dim + d] * load1(k[p] + d);
  for (int i = 0; i < kN / kLanes; ++i) out[i] = sum8_each(acc + i * kLanes);
}

/// \brief s[h] = the scores q_h . k[p] of one tile of eight rows, position p in lane p.
///
/// \param q  [kHeads, head_dim] query heads, consecutive
/// \param k  8 row pointers, each [head_dim] as stored
/// Heads go in dot_blocks of kHeads heads by as many rows as the accumulators allow, so that each
/// loaded K vector serves every head; a few shuffles then regroup the blocks' lanes by head.
template <int kHeads, class T>
void scores_tile(const float* q, const T* const* k, int head_dim, Vec8* s) {
  static_assert(kHeads == 1 || kHeads == 2 || kHeads == 4, "query heads go 4, 2 or 1 at a time");
  constexpr int kPos = std::min(kLanes, kScoreAccumulators / kHeads);  // rows per block
  constexpr int kBlocks = kLanes / kPos, kOut = kHeads * kPos / kLanes;
  Vec8 b[kBlocks][kOut];  // block c covers rows c * kPos onwards
  for (int c = 0; c < kBlocks; ++c) dot_block<kHeads, kPos>(q, k + c * kPos, head_dim, b[c]);
  if constexpr (kPos == kLanes) {  // one block: out[h] is already head h's tile
    for (int h = 0; h < kHeads; ++h) s[h] = b[0][h];
  } else if constexpr (kPos == 4) {  // out[i] = [head 2i: rows 0-3 | head 2i+1: rows 0-3]
    for (int i = 0; i < kOut; ++i) {
      s[2 * i] = __builtin_shufflevector(b[0][i], b[1][i], 0, 1, 2, 3, 8, 9, 10, 11);
      s[2 * i + 1] = __builtin_shufflevector(b[0][i], b[1][i], 4, 5, 6, 7, 12, 13, 14, 15);
    }
  } else {  // four blocks of [h0 h0 h1 h1 h2 h2 h3 h3], two rows each: pairs first, then halves
    const Vec8 h01_lo = __builtin_shufflevector(b[0][0], b[1][0], 0, 1, 8, 9, 2, 3, 10, 11);
    const Vec8 h23_lo = __builtin_shufflevector(b[0][0], b[1][0], 4, 5, 12, 13, 6, 7, 14, 15);
    const Vec8 h01_hi = __builtin_shufflevector(b[2][0], b[3][0], 0, 1, 8, 9, 2, 3, 10, 11);
    const Vec8 h23_hi = __builtin_shufflevector(b[2][0], b[3][0], 4, 5, 12, 13, 6, 7, 14, 15);
    s[0] = __builtin_shufflevector(h01_lo, h01_hi, 0, 1, 2, 3, 8, 9, 10, 11);
    s[1] = __builtin_shufflevector(h01_lo, h01_hi, 4, 5, 6, 7, 12, 13, 14, 15);
    s[2] = __builtin_shufflevector(h23_lo, h23_hi, 0, 1, 2, 3, 8, 9, 10, 11);
    s[3] = __builtin_shufflevector(h23_lo, h23_hi, 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

/// \brief o_h[d] += w_h[p] * v[p][d] for kHeads heads over the first nt rows, p increasing.
///
/// \param w   kHeads weight rows, w_h = w + h * w_stride, each [nt]
/// \param v   nt row pointers, each [head_dim] as stored
/// \param o   [kHeads, head_dim] outputs, consecutive
/// kRows > 0 fixes nt at compile time (a full tile, unrolled); 0 takes nt as given. Each loaded
/// V vector serves kHeads heads.
template <int kHeads, int kRows, class T>
void accumulate_block(const float* w, long w_stride, const T* const* v, int nt, int head_dim,
                      float* o) {
  if constexpr (kRows > 0) nt = kRows;
  constexpr int kVecs = kLanes / kHeads;  // 8 accumulators: 64 / kHeads outputs per head
  int d = 0;
  for (; d + kVecs * kLanes <= head_dim; d += kVecs * kLanes) {
    Vec8 acc[kHeads][kVecs];
    for (int h = 0; h < kHeads; ++h)
      for (int j = 0; j < kVecs; ++j) acc[h][j] = load8(o + h * head_dim + d + j * kLanes);
    for (int p = 0; p < nt; ++p) {
      Vec8 vv[kVecs];
      for (int j = 0; j < kVecs; ++j) vv[j] = in_register(load8(v[p] + d + j * kLanes));
      for (int h = 0; h < kHeads; ++h) {
        const float wp = w[h * w_stride + p];
        for (int j = 0; j < kVecs; ++j) acc[h][j] += wp * vv[j];
      }
    }
    for (int h = 0; h < kHeads; ++h)
      for (int j = 0; j < kVecs; ++j) store8(o + h * head_dim + d + j * kLanes, acc[h][j]);
  }
  for (; d < head_dim; ++d)  // the last head_dim % (kVecs * 8) outputs, one at a time
    for (int h = 0; h < kHeads; ++h) {
      float a = o[h * head_dim + d];
      for (int p = 0; p < nt; ++p) a += w[h * w_stride + p] * load1(v[p] + d);
      o[h * head_dim + d] = a;
    }
}

/// \brief Largest lane of a.
inline float max8(Vec8 a) {
  const auto vmax = [](Vec8 x, Vec8 y) { return x > y ? x : y; };
  a = vmax(a, __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3));
  a = vmax(a, __builtin_shufflevector(a, a, 2, 3, 0, 1, 6, 7, 4, 5));
  a = vmax(a, __builtin_shufflevector(a, a, 1, 0, 3, 2, 5, 4, 7, 6));
  return a[0];
}

/// \brief One online-softmax step for kHeads query heads over one tile of scores.
///
/// On entry s[h] holds head h's raw scores q.k for the tile (lanes nt and up are ignored), m[h] its
/// largest scaled score so far (-inf at the start) and l[h] its sum of exp(score - m[h]) so far. On
/// return s[h] holds the weights exp(score * scale - m'), zero in the ignored lanes; m[h] = m', the
/// new largest score; l[h] is rescaled to m' and grown by the tile's weights (summed as sum8 sums);
/// and factor[h] = exp(m_old - m') is what earlier outputs must be multiplied by: exactly 1 when
/// the max did not grow, 0 on the first tile. The exponentials go through one 8-wide Eigen array
/// per head, so every weight takes the same vectorised path wherever it sits.
template <int kHeads>
void softmax_tile(Vec8* s, int nt, float scale, float* m, float* l, float* factor) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const Vec8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
  const auto live = lane < static_cast<float>(nt);  // all-ones lanes for the tile's positions
  for (int h = 0; h < kHeads; ++h) {
    Vec8 sh = s[h] * scale;
    if (nt < kLanes) sh = live ? sh : Vec8{} - kInf;
    const float m_new = std::max(m[h], max8(sh));
    factor[h] = m_new == m[h] ? 1.0f : std::exp(m[h] - m_new);
    m[h] = m_new;
    Eigen::Array<float, kLanes, 1> x;  // one 8-wide packet: the same exp for every lane
    sh -= m_new;
    std::memcpy(x.data(), &sh, sizeof sh);
    x = x.exp();
    Vec8 p;
    std::memcpy(&p, x.data(), sizeof p);
    if (nt < kLanes) p = live ? p : Vec8{};
    l[h] = l[h] * factor[h] + sum8(p);
    s[h] = p;
  }
}

}  // namespace kvheap::cpu::simd
