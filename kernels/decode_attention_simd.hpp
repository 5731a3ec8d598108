// The inner loops of the CPU attention twin (kernels/decode_attention_cpu.hpp), written on 8-float
// vectors, and on 16-float ones where the target has AVX-512.
//
// Decode attention does about two multiply-adds per byte of cache it reads, so the loops must run
// near the multiply-add peak just to keep up with memory: blocks of accumulators small enough to
// live in registers yet many enough to hide the multiply-add latency, every loaded row reused by
// several query heads, and horizontal sums done eight at a time by a transpose.
//
// Every reduction has an order fixed by the element type and head_dim alone: a dot product keeps
// each element in a fixed lane (lane d % 8 for fp32 and fp16; for bf16, whose blocks of 16 load
// interleaved, lane i takes elements 2i and 2i + 1 of each block) and adds the lanes pairwise; an
// output element accumulates a tile's rows in the order it is handed them. So any caller that hands
// in the same numbers in the same order gets bitwise the same result, whatever the layout, the
// blocking or the thread. Whether a multiply and an add fuse is the optimiser's choice, loop by
// loop, so the 8- and 16-float loops of one build may differ in the last bit; the layouts of one
// build always agree (docs/pages/cpu_twin.md).
#pragma once

#if defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/exp_simd.hpp"
#include "kernels/kv_types.hpp"

namespace kvheap::cpu::simd {

/// \brief Lanes of Vec8: partial sums per dot product.
inline constexpr int kLanes = 8;

/// \brief Eight floats as one value. GCC and Clang lower it to the target's vector registers (one
/// AVX register, two SSE or NEON ones), which pins the lane structure the reductions rely on;
/// left alone, the auto-vectoriser may vectorise across positions with gathers instead.
using Vec8 = float __attribute__((vector_size(kLanes * sizeof(float))));
/// \brief Eight 32-bit words, the bits of 8 floats or of 16 bf16.
using U32x8 = std::uint32_t __attribute__((vector_size(kLanes * sizeof(std::uint32_t))));

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
  U16x8 bits;
  std::memcpy(&bits, p, sizeof bits);
  const U32x8 wide = __builtin_convertvector(bits, U32x8) << 16;
  Vec8 v;
  std::memcpy(&v, &wide, sizeof v);
  return v;
#endif
}
/// \brief Elements in a block: two Vec8, the unit load16 widens.
inline constexpr int kBlock = 2 * kLanes;

/// \brief Whether T's whole blocks of 16 elements load into lanes interleaved (see load16): bf16's
/// do. The loops then hold the query and the output of each whole block in that order too
/// (to_block_order), so lane for lane the right elements still meet.
template <class T>
inline constexpr bool kInterleaved = std::is_same_v<T, BF16Bits>;

/// \brief 16 stored bf16 values widened to fp32 as (elements 0, 2, ..., 14; elements 1, 3, ...,
/// 15). A bf16 is the top half of an fp32, so from one 32-byte load an AND yields the odd
/// elements and a shift the even ones: two instructions per 16 elements, where widening them in
/// order takes four (a shuffle and a shift per 8), and those run on the vector pipes the
/// multiply-adds need. In the twin's inner loops that cut the cycles per bf16 tile by about a
/// tenth.
inline void load16(const BF16Bits* p, Vec8& even, Vec8& odd) {
  static_assert(std::endian::native == std::endian::little, "element 2i is lane i's low half");
  U32x8 x;
  std::memcpy(&x, p, sizeof x);
  const U32x8 lo = x << 16, hi = x & 0xFFFF0000u;
  std::memcpy(&even, &lo, sizeof even);
  std::memcpy(&odd, &hi, sizeof odd);
}

/// \brief Where element e of a block of 16 sits in block order: the even elements fill lanes 0-7
/// of the first vector, the odd ones those of the second.
constexpr int block_slot(int e) { return (e % 2) * kLanes + e / 2; }

/// \brief x[0, n) reordered in place, whole block by whole block: from natural order into T's
/// block order when kToBlock, else back. For bf16 each whole block of 16 becomes [its even
/// elements, its odd elements]; the last n % 16 stay as they are, and so does every element of
/// the other types.
template <class T, bool kToBlock>
void reorder_blocks(float* x, int n) {
  if constexpr (kInterleaved<T>) {
    for (int b = 0; b + kBlock <= n; b += kBlock) {
      float t[kBlock];
      for (int e = 0; e < kBlock; ++e) {
        if constexpr (kToBlock) {
          t[block_slot(e)] = x[b + e];
        } else {
          t[e] = x[b + block_slot(e)];
        }
      }
      std::memcpy(x + b, t, sizeof t);
    }
  }
}

/// \brief x[0, n) from natural order into T's block order, in place (see reorder_blocks).
template <class T>
void to_block_order(float* x, int n) {
  reorder_blocks<T, true>(x, n);
}

/// \brief The inverse of to_block_order: x[0, n) back to natural order, in place.
template <class T>
void from_block_order(float* x, int n) {
  reorder_blocks<T, false>(x, n);
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

/// \brief Whether the hot loops run on 16-float vectors (see the top of this file): where the
/// target has 512-bit registers. Elsewhere a 16-float vector would take two registers and the
/// loops' accumulators would no longer fit.
#if defined(__AVX512F__)
inline constexpr bool kWideDefault = true;
#else
inline constexpr bool kWideDefault = false;
#endif

/// \brief Sixteen floats as one value: two Vec8 side by side, lanes 0-7 and 8-15.
using Vec16 = float __attribute__((vector_size(2 * kLanes * sizeof(float))));
/// \brief Sixteen 32-bit words.
using U32x16 = std::uint32_t __attribute__((vector_size(2 * kLanes * sizeof(std::uint32_t))));

/// \brief [a | b]: a in lanes 0-7, b in lanes 8-15.
inline Vec16 join(Vec8 a, Vec8 b) {
  return __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
/// \copydoc join(Vec8, Vec8)
inline U32x16 join(U32x8 a, U32x8 b) {
  return __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
/// \brief [p[0, 8) | p[0, 8)]: 8 floats loaded into both halves. Spelled with an intrinsic on
/// AVX-512 so that it is one broadcast load; GCC turns the generic form into a load and a shuffle,
/// and shuffles run on a port the multiply-adds need. Zero-masked with every lane kept: the same
/// instruction, where GCC 12's unmasked form starts from _mm512_undefined_pd and warns at -O1.
inline Vec16 twice(const float* p) {
#if defined(__AVX512F__)
  return reinterpret_cast<Vec16>(
      _mm512_maskz_broadcast_f64x4(0xFF, _mm256_castps_pd(_mm256_loadu_ps(p))));
#else
  const Vec8 x = load8(p);
  return join(x, x);
#endif
}
/// \brief Lanes 0-7 of v.
inline Vec8 low_half(Vec16 v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
/// \brief Lanes 8-15 of v.
inline Vec8 high_half(Vec16 v) {
  return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
}
/// \brief The bits of 16 stored bf16 (32 bytes).
inline U32x8 load_bits(const BF16Bits* p) {
  U32x8 x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
/// \brief Unaligned load of 16 floats.
inline Vec16 load16f(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
/// \brief Unaligned store of 16 floats.
inline void store16(float* p, Vec16 v) { std::memcpy(p, &v, sizeof v); }

/// \brief 16 consecutive stored elements widened to fp32 in T's block order: what the two Vec8
/// of the 8-float loops hold for the same elements, side by side.
inline Vec16 load_block16(const float* p) { return load16f(p); }
/// \copydoc load_block16(const float*)
inline Vec16 load_block16(const F16Bits* p) { return join(load8(p), load8(p + kLanes)); }
/// \copydoc load_block16(const float*)
///
/// For bf16 that is [even elements | odd elements] (see load16): the block's 32 bytes go into both
/// halves, and then a byte shuffle (AVX-512BW) or a shift and an AND by lane-dependent amounts
/// move each half's elements into the top of its words and clear the rest.
inline Vec16 load_block16(const BF16Bits* p) {
#if defined(__AVX512BW__)
  // vpshufb picks bytes within each 16-byte lane; a byte index of -1 writes zero. The block's
  // elements 0-7 sit in lanes 0 and 2, elements 8-15 in lanes 1 and 3, and 32-bit word i of a
  // lane holds that lane's elements 2i and 2i + 1. Lanes 0-1 (the low half) keep bytes 4i and
  // 4i + 1 of each word (its even element), lanes 2-3 bytes 4i + 2 and 4i + 3 (its odd one), in
  // the top two bytes of the word.
  // Zero-masked with every lane kept, as in twice().
  const __m512i x =
      _mm512_maskz_broadcast_i64x4(0xFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i pick = _mm512_set_epi8(                            // bytes 63 down to 0
      15, 14, -1, -1, 11, 10, -1, -1, 7, 6, -1, -1, 3, 2, -1, -1,  // high half: odd elements
      15, 14, -1, -1, 11, 10, -1, -1, 7, 6, -1, -1, 3, 2, -1, -1,  //
      13, 12, -1, -1, 9, 8, -1, -1, 5, 4, -1, -1, 1, 0, -1, -1,    // low half: even elements
      13, 12, -1, -1, 9, 8, -1, -1, 5, 4, -1, -1, 1, 0, -1, -1);   //
  return reinterpret_cast<Vec16>(_mm512_shuffle_epi8(x, pick));
#else
  const U32x8 x = load_bits(p);
  const U32x16 shift = {16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0};
  const U32x16 keep = {~0u,         ~0u,         ~0u,         ~0u,         ~0u,         ~0u,
                       ~0u,         ~0u,         0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u,
                       0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u};
  const U32x16 bits = (join(x, x) << shift) & keep;
  Vec16 v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
#endif
}

/// \brief load16 of two rows at once: the even elements of a's block and of b's in `even`
/// ([a | b]), the odd ones in `odd`.
inline void load16_pair(const BF16Bits* a, const BF16Bits* b, Vec16& even, Vec16& odd) {
  const U32x16 x = join(load_bits(a), load_bits(b));
  const U32x16 lo = x << 16, hi = x & 0xFFFF0000u;
  std::memcpy(&even, &lo, sizeof even);
  std::memcpy(&odd, &hi, sizeof odd);
}

/// \brief v, kept in a register: each loaded vector is used by several multiply-adds, and some
/// compilers' cost models (GCC's for AMD Zen, for one) would rather reload it for every use,
/// which doubles the loads of the inner loops and halves their speed.
inline Vec8 in_register(Vec8 v) {
#if defined(__x86_64__) && defined(__AVX__)
  __asm__("" : "+v"(v));  // an empty instruction that "changes" v: the compiler must keep it
#endif
  return v;
}

/// \copydoc in_register(Vec8)
inline Vec16 in_register(Vec16 v) {
#if defined(__x86_64__) && defined(__AVX512F__)
  __asm__("" : "+v"(v));
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

/// \brief sum8_each for four vectors: lane i < 4 is sum8(a[i]), bit for bit; lanes 4-7 repeat
/// lanes 0-3.
inline Vec8 sum8_each4(const Vec8* a) {
  const Vec8 two = pair_sums(pair_sums(a[0], a[1]), pair_sums(a[2], a[3]));
  return pair_sums(two, two);
}

/// \brief Vector accumulators a score block of the 8-float loops keeps: 16 where the target has
/// 32 vector registers (AVX-512), so that a block covers four heads by four rows and each loaded
/// query vector serves four rows; else 8, which with the loaded operands still fits in 16
/// registers. (The wide loops keep four per head, 16-float ones: a head's eight rows in pairs.)
#if defined(__AVX512VL__)
inline constexpr int kScoreAccumulators = 16;
#else
inline constexpr int kScoreAccumulators = kLanes;
#endif

/// \brief The dot products' multiply-adds for rows taken in pairs on 16-float vectors, from
/// element 0 as far as whole vectors go; returns the element where the 8-float loops (dot_from)
/// go on.
///
/// out[h * kPos / 2 + i] holds, in lanes 0-7, the accumulator dot_from keeps for head h and row
/// 2i, and in lanes 8-15 that of row 2i + 1. Each lane adds the products dot_from's 8-float loops
/// add, in the same order (bitwise the same where the compiler fuses both alike). A loaded
/// query vector serves both halves and each K load brings two rows. Always inlined, so that its
/// caller's copy of the accumulators is the same registers, not a kilobyte copied through memory.
template <int kHeads, int kPos, class T>
[[gnu::always_inline]] inline int dot_pairs(const float* q, const T* const* k, int head_dim,
                                            Vec16* out) {
  static_assert(kPos % 2 == 0, "rows go in pairs");
  constexpr int kPairs = kPos / 2;
  // Local accumulators, copied out at the end: q may alias out as far as the compiler knows, so
  // accumulating into out directly would load and store every accumulator at every step.
  Vec16 wide[kHeads * kPairs] = {};
  const auto query = [&](int h, int d) {  // [q_h[d, d + 8) | the same]
    return in_register(twice(q + static_cast<long>(h) * head_dim + d));
  };
  int d = 0;
  if constexpr (kInterleaved<T>) {  // whole blocks, as in dot_from
    for (; d + kBlock <= head_dim; d += kBlock) {
      Vec16 qa[kHeads], qb[kHeads];
      for (int h = 0; h < kHeads; ++h) {
        qa[h] = query(h, d);
        qb[h] = query(h, d + kLanes);
      }
      for (int i = 0; i < kPairs; ++i) {
        Vec16 ka, kb;
        load16_pair(k[2 * i] + d, k[2 * i + 1] + d, ka, kb);
        ka = in_register(ka);
        kb = in_register(kb);
        for (int h = 0; h < kHeads; ++h) {
          wide[h * kPairs + i] += qa[h] * ka;
          wide[h * kPairs + i] += qb[h] * kb;
        }
      }
    }
  } else {
    for (; d + kLanes <= head_dim; d += kLanes) {
      Vec16 qv[kHeads];
      for (int h = 0; h < kHeads; ++h) qv[h] = query(h, d);
      for (int i = 0; i < kPairs; ++i) {
        const Vec16 kv = in_register(join(load8(k[2 * i] + d), load8(k[2 * i + 1] + d)));
        for (int h = 0; h < kHeads; ++h) wide[h * kPairs + i] += qv[h] * kv;
      }
    }
  }
  std::copy(wide, wide + kHeads * kPairs, out);
  return d;
}

/// \brief dot_pairs' accumulators as dot_from's: acc[h * kPos + p], one 8-float vector each.
template <int kHeads, int kPos>
void split_pairs(const Vec16* wide, Vec8* acc) {
  for (int i = 0; i < kHeads * kPos / 2; ++i) {
    acc[2 * i] = low_half(wide[i]);
    acc[2 * i + 1] = high_half(wide[i]);
  }
}

/// \brief pair_sums on 16 floats: [a0+a1, a2+a3, ..., a14+a15, b0+b1, ..., b14+b15].
inline Vec16 pair_sums(Vec16 a, Vec16 b) {
  return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
         __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

/// \brief The sums of one head's eight rows from dot_pairs' accumulators (wide[0, 4), rows in
/// pairs): lane 2p or 2p + 1 holds row p's ((a0 + a1) + (a2 + a3)), the other its ((a4 + a5) +
/// (a6 + a7)). One more pair_sums of two heads' finishes sum8 for both, bit for bit.
inline Vec16 head_partials(const Vec16* wide) {
  return pair_sums(pair_sums(wide[0], wide[1]), pair_sums(wide[2], wide[3]));
}

/// \brief dot_block's 8-float loops from element d on, into its accumulators io[kHeads * kPos].
/// Always inlined, as dot_pairs is: on AVX2 a call per block of the 8-float loops cost about a
/// fifth of the twin's speed.
template <int kHeads, int kPos, class T>
[[gnu::always_inline]] inline void dot_from(const float* q, const T* const* k, int head_dim, int d,
                                            Vec8* io) {
  // Local accumulators: q may alias io as far as the compiler knows (see dot_pairs).
  Vec8 acc[kHeads * kPos];
  std::copy(io, io + kHeads * kPos, acc);
  if constexpr (kInterleaved<T>) {  // whole blocks: q is in block order, rows load interleaved
    for (; d + kBlock <= head_dim; d += kBlock) {
      Vec8 qa[kHeads], qb[kHeads];
      for (int h = 0; h < kHeads; ++h) {
        qa[h] = in_register(load8(q + static_cast<long>(h) * head_dim + d));
        qb[h] = in_register(load8(q + static_cast<long>(h) * head_dim + d + kLanes));
      }
      for (int p = 0; p < kPos; ++p) {
        Vec8 ka, kb;
        load16(k[p] + d, ka, kb);
        ka = in_register(ka);
        kb = in_register(kb);
        for (int h = 0; h < kHeads; ++h) {
          acc[h * kPos + p] += qa[h] * ka;
          acc[h * kPos + p] += qb[h] * kb;
        }
      }
    }
  }
  const int body = head_dim - head_dim % kLanes;
  for (; d < body; d += kLanes) {
    Vec8 qv[kHeads];
    for (int h = 0; h < kHeads; ++h)
      qv[h] = in_register(load8(q + static_cast<long>(h) * head_dim + d));
    for (int p = 0; p < kPos; ++p) {
      const Vec8 kv = in_register(load8(k[p] + d));
      for (int h = 0; h < kHeads; ++h) acc[h * kPos + p] += qv[h] * kv;
    }
  }
  if (body < head_dim) {  // head_dim not a multiple of 8: element d goes to lane d - body
    Vec8 qt[kHeads] = {};
    for (int h = 0; h < kHeads; ++h)
      for (int e = body; e < head_dim; ++e)
        qt[h][e - body] = q[static_cast<long>(h) * head_dim + e];
    for (int p = 0; p < kPos; ++p) {
      Vec8 kt = {};
      for (int e = body; e < head_dim; ++e) kt[e - body] = load1(k[p] + e);
      for (int h = 0; h < kHeads; ++h) acc[h * kPos + p] += qt[h] * kt;  // + 0 in the other lanes
    }
  }
  std::copy(acc, acc + kHeads * kPos, io);
}

/// \brief Dot products of kHeads query heads with kPos rows: lane j of out[i] is the product
/// numbered 8 i + j, product h * kPos + p being q_h . k[p] (kHeads * kPos = 8 or 16).
///
/// \param q  [kHeads, head_dim] query heads, consecutive, in T's block order (to_block_order)
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
  dot_from<kHeads, kPos>(q, k, head_dim, 0, acc);
  for (int i = 0; i < kN / kLanes; ++i) out[i] = sum8_each(acc + i * kLanes);
}

/// \brief s[h] = the scores q_h . k[p] of one tile of eight rows, position p in lane p.
///
/// \param q  [kHeads, head_dim] query heads, consecutive, in T's block order
/// \param k  8 row pointers, each [head_dim] as stored
/// Heads go in dot_blocks of kHeads heads by as many rows as the accumulators allow, so that each
/// loaded K vector serves every head; a few shuffles then regroup the blocks' lanes by head.
///
/// kWide takes all eight rows in one block of pairs (dot_pairs) and sums them on 16-float
/// vectors, two heads at a time, when the pairs cover head_dim; the same sums either way.
template <int kHeads, class T, bool kWide = kWideDefault>
void scores_tile(const float* q, const T* const* k, int head_dim, Vec8* s) {
  static_assert(kHeads == 1 || kHeads == 2 || kHeads == 4, "query heads go 4, 2 or 1 at a time");
  if constexpr (kWide) {
    Vec16 wide[kHeads * kLanes / 2];  // head h's rows 2i, 2i + 1 at h * 4 + i
    const int d = dot_pairs<kHeads, kLanes>(q, k, head_dim, wide);
    if (d == head_dim) {
      Vec16 part[kHeads];
      for (int h = 0; h < kHeads; ++h) part[h] = head_partials(wide + h * kLanes / 2);
      for (int h = 0; h < kHeads; h += 2) {
        const Vec16 both = pair_sums(part[h], part[std::min(h + 1, kHeads - 1)]);
        s[h] = low_half(both);
        if (h + 1 < kHeads) s[h + 1] = high_half(both);
      }
    } else {  // a tail of head_dim is left: the 8-float loops finish it
      Vec8 acc[kHeads * kLanes];
      split_pairs<kHeads, kLanes>(wide, acc);
      dot_from<kHeads, kLanes>(q, k, head_dim, d, acc);
      for (int h = 0; h < kHeads; ++h) s[h] = sum8_each(acc + h * kLanes);
    }
    return;
  }
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

/// \brief One step of accumulate_block: outputs [d, d + 8 kVecs) of kHeads heads, held in
/// kHeads * kVecs accumulators while the nt rows go by. kBlocks loads bf16 rows a block at a
/// time (interleaved, load16); without it rows load 8 elements in order.
template <int kHeads, int kRows, int kVecs, class T, bool kBlocks = kInterleaved<T>>
void accumulate_step(const float* w, long w_stride, const T* const* v, int nt, int head_dim, int d,
                     float* o) {
  if constexpr (kRows > 0) nt = kRows;
  Vec8 acc[kHeads][kVecs];
  for (int h = 0; h < kHeads; ++h)
    for (int j = 0; j < kVecs; ++j) acc[h][j] = load8(o + h * head_dim + d + j * kLanes);
  for (int p = 0; p < nt; ++p) {
    Vec8 vv[kVecs];
    if constexpr (kBlocks) {
      static_assert(kVecs % 2 == 0, "interleaved rows load a block (two vectors) at a time");
      for (int j = 0; j < kVecs; j += 2) {
        load16(v[p] + d + j * kLanes, vv[j], vv[j + 1]);
        vv[j] = in_register(vv[j]);
        vv[j + 1] = in_register(vv[j + 1]);
      }
    } else {
      for (int j = 0; j < kVecs; ++j) vv[j] = in_register(load8(v[p] + d + j * kLanes));
    }
    for (int h = 0; h < kHeads; ++h) {
      const float wp = w[h * w_stride + p];
      for (int j = 0; j < kVecs; ++j) acc[h][j] += wp * vv[j];
    }
  }
  for (int h = 0; h < kHeads; ++h)
    for (int j = 0; j < kVecs; ++j) store8(o + h * head_dim + d + j * kLanes, acc[h][j]);
}

/// \brief accumulate_step on 16-float vectors: outputs [d, d + 16 kVecs) of kHeads heads. Each
/// output element adds the same products in the same order as in accumulate_step.
template <int kHeads, int kRows, int kVecs, class T>
void accumulate_step16(const float* w, long w_stride, const T* const* v, int nt, int head_dim,
                       int d, float* o) {
  if constexpr (kRows > 0) nt = kRows;
  constexpr int kWidth = 2 * kLanes;
  Vec16 acc[kHeads][kVecs];
  for (int h = 0; h < kHeads; ++h)
    for (int j = 0; j < kVecs; ++j) acc[h][j] = load16f(o + h * head_dim + d + j * kWidth);
  for (int p = 0; p < nt; ++p) {
    Vec16 vv[kVecs];
    for (int j = 0; j < kVecs; ++j) vv[j] = in_register(load_block16(v[p] + d + j * kWidth));
    for (int h = 0; h < kHeads; ++h) {
      const float wp = w[h * w_stride + p];
      for (int j = 0; j < kVecs; ++j) acc[h][j] += wp * vv[j];
    }
  }
  for (int h = 0; h < kHeads; ++h)
    for (int j = 0; j < kVecs; ++j) store16(o + h * head_dim + d + j * kWidth, acc[h][j]);
}

/// \brief accumulate_block's outputs from d on, on 16-float vectors: steps of kVecs vectors per
/// head while they fit, then of half as many, down to one; returns where the rest begins. Every
/// step starts at a multiple of 16, so bf16 blocks stay whole.
template <int kHeads, int kRows, int kVecs, class T>
int accumulate_wide(const float* w, long w_stride, const T* const* v, int nt, int head_dim, int d,
                    float* o) {
  for (; d + kVecs * 2 * kLanes <= head_dim; d += kVecs * 2 * kLanes)
    accumulate_step16<kHeads, kRows, kVecs>(w, w_stride, v, nt, head_dim, d, o);
  if constexpr (kVecs > 1) {
    return accumulate_wide<kHeads, kRows, kVecs / 2>(w, w_stride, v, nt, head_dim, d, o);
  } else {
    return d;
  }
}

/// \brief o_h[d] += w_h[p] * v[p][d] for kHeads heads over the first nt rows, p increasing.
///
/// \param w   kHeads weight rows, w_h = w + h * w_stride, each [nt]
/// \param v   nt row pointers, each [head_dim] as stored
/// \param o   [kHeads, head_dim] outputs, consecutive, in T's block order (to_block_order)
/// kRows > 0 fixes nt at compile time (a full tile, unrolled); 0 takes nt as given. Each loaded
/// V vector serves kHeads heads. Every output element sums the same products in the same order
/// whatever the block order, so the results do not depend on it. kWide first runs 16-float steps
/// (accumulate_wide) with sixteen accumulators, the same products in the same order.
template <int kHeads, int kRows, class T, bool kWide = kWideDefault>
void accumulate_block(const float* w, long w_stride, const T* const* v, int nt, int head_dim,
                      float* o) {
  constexpr int kVecs = kLanes / kHeads;  // 8 accumulators: 64 / kHeads outputs per head
  int d = 0;
  if constexpr (kWide)
    d = accumulate_wide<kHeads, kRows, 2 * kLanes / kHeads>(w, w_stride, v, nt, head_dim, 0, o);
  for (; d + kVecs * kLanes <= head_dim; d += kVecs * kLanes)
    accumulate_step<kHeads, kRows, kVecs>(w, w_stride, v, nt, head_dim, d, o);
  if constexpr (kInterleaved<T>)  // whole blocks left over load as blocks: their o is in order
    for (; d + kBlock <= head_dim; d += kBlock)
      accumulate_step<kHeads, kRows, 2>(w, w_stride, v, nt, head_dim, d, o);
  // Then 8 at a time in natural order (what is left of a step, or for bf16 the first 8 of a
  // tail shorter than a block): every output the wide loops reach is then a vector lane here
  // too, whose multiply-add may round differently from the scalar one below.
  for (; d + kLanes <= head_dim; d += kLanes)
    accumulate_step<kHeads, kRows, 1, T, false>(w, w_stride, v, nt, head_dim, d, o);
  if constexpr (kRows > 0) nt = kRows;
  for (; d < head_dim; ++d)  // the rest, one output at a time
    for (int h = 0; h < kHeads; ++h) {
      float a = o[h * head_dim + d];
      for (int p = 0; p < nt; ++p) a += w[h * w_stride + p] * load1(v[p] + d);
      o[h * head_dim + d] = a;
    }
}

/// \brief Largest lane of each half of a, in every lane of that half.
inline Vec16 half_max(Vec16 a) {
  const auto vmax = [](Vec16 x, Vec16 y) { return x > y ? x : y; };
  a = vmax(a, __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
  a = vmax(a, __builtin_shufflevector(a, a, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  return vmax(a,
              __builtin_shufflevector(a, a, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
}

/// \brief One online-softmax step for kHeads query heads over one tile of scores.
///
/// On entry s[h] holds head h's raw scores q.k for the tile (lanes nt and up are ignored), m[h] its
/// largest scaled score so far (-inf at the start) and l[h] its sum of exp(score - m[h]) so far. On
/// return s[h] holds the weights exp(score * scale - m'), zero in the ignored lanes; m[h] = m', the
/// new largest score; l[h] is rescaled to m' and grown by the tile's weights (summed as sum8 sums);
/// and factor[h] = exp(m_old - m') is what earlier outputs must be multiplied by: exactly 1 when
/// the max did not grow, 0 on the first tile. Heads go two at a time, side by side in 16 floats,
/// and the exponentials through one 16-wide vector per pair (exp_nonpositive): every weight takes
/// the same vectorised path wherever it sits, and on AVX-512 one instruction serves two heads
/// (that took about a third off this step). The heads' sums come out of one transpose (sum8_each4),
/// not eight lane extractions each.
template <int kHeads>
void softmax_tile(Vec8* s, int nt, float scale, float* m, float* l, float* factor) {
  static_assert(kHeads >= 1 && kHeads <= 4, "the sums transpose four heads at most");
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const Vec16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7};
  const Vec16 second = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  const auto live = lane < static_cast<float>(nt);  // all-ones lanes for the tile's positions
  for (int h = 0; h < kHeads; h += 2) {
    const int h2 = std::min(h + 1, kHeads - 1);  // an odd head out pairs with itself
    Vec16 x = join(s[h], s[h2]) * scale;
    if (nt < kLanes) x = live ? x : Vec16{} - kInf;
    const Vec16 top = half_max(x);
    const float old0 = m[h], old1 = m[h2];
    const float new0 = std::max(old0, top[0]), new1 = std::max(old1, top[kLanes]);
    factor[h] = new0 == old0 ? 1.0f : std::exp(old0 - new0);
    factor[h2] = new1 == old1 ? 1.0f : std::exp(old1 - new1);
    m[h] = new0;
    m[h2] = new1;
    x -= second > 0.0f ? Vec16{} + new1 : Vec16{} + new0;
    x = exp_nonpositive(x);  // one 16-wide vector on AVX-512, two 8-wide on AVX; -inf gives 0
    s[h] = low_half(x);
    s[h2] = h2 == h ? s[h] : high_half(x);
  }
  Vec8 p[4];
  for (int h = 0; h < 4; ++h) p[h] = s[std::min(h, kHeads - 1)];  // fewer heads: repeat the last
  const Vec8 sums = sum8_each4(p);
  for (int h = 0; h < kHeads; ++h) l[h] = l[h] * factor[h] + sums[h];
}

}  // namespace kvheap::cpu::simd
