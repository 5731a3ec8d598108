// Attention of many query heads over one span of a KV head's rows as two tiled matrix products:
// the CPU prefix pass of shared-prefix attention (kernels/shared_prefix_attention_cpu.hpp).
//
// A shared prefix is read for r rows x group query heads per KV head, 64 of them for 16 samples
// of Llama-3-8B. attend_span serves four heads per loaded vector, with an online softmax and a
// horizontal sum for every tile of eight positions; with 64 heads the same K and V rows go
// through its inner loops sixteen times, and those loops, not memory, set the pace. Here the
// heads' queries are transposed once per call, so that 16 heads (8 without AVX-512) sit in the
// lanes of one vector, and the K of each block of 128 positions (48 without AVX-512) is widened
// once into fp32 scratch. The block's scores are then a register-tiled product with heads in the
// lanes (with AVX-512, 8 positions by 32 heads, or 16 positions by the last 16 heads: a broadcast
// K element against two query vectors, or one, per step; with AVX2, 6 by 16 or 8), the online
// softmax runs on one vector of heads at a time, and the weighted values are a second tiled
// product with outputs in the lanes (4 heads by 64 outputs, or 6 by 16: a broadcast weight
// against four or two V vectors, widened in registers from the rows as stored). Every K and V
// element is read from memory once per block and used by every head from the core's caches, and
// no sum runs across lanes. While a block's score tiles run, they prefetch the next block's rows
// into the L2, and during a KV head's last block the first of the next KV head of its range. The
// kernels are compiled for head_dim 64 and 128 apart from any other, so that the rows' offsets are
// constants in their addresses.
//
// The result is attend_span's partial state (acc, max, sum), so it merges with other spans by
// log-sum-exp as before. Its sums run in another order than attend_span's, so it agrees with it
// within rounding (tier 2), not bit for bit.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/decode_attention_cpu.hpp"
#include "kernels/decode_attention_simd.hpp"
#include "kernels/exp_simd.hpp"

namespace kvheap::cpu {

/// \brief Positions per block of attend_span_product: a whole number of score tiles (8 and 16
/// positions with AVX-512, 6 without). Each block pays for loading and storing the value tiles'
/// sums, its softmax's max pass and a rescaling of the outputs, so with AVX-512 longer blocks ran
/// faster, up to 128 positions, when K and V were both widened into scratch. Since V is widened in
/// registers and the prefetches go to the L2, 64 and 256 positions take the same time as 128
/// (docs/results/shared-prefix-cpu-amd-epyc-zen4.md).
inline constexpr int kProductBlock = simd::kWideDefault ? 128 : 48;
/// \brief Query heads per vector of attend_span_product's scores and softmax: a vector register's
/// floats, 16 with AVX-512 and 8 without. (Wider vectors than the registers, written with GCC's
/// vector extension, compile to copies through the stack: about 2 GFLOP/s.)
inline constexpr int kProductLanes = simd::kWideDefault ? 16 : 8;

/// \brief Query heads attend_span_product keeps per KV head: n_heads_q rounded up to whole vectors.
inline int product_heads(int n_heads_q) {
  return (n_heads_q + kProductLanes - 1) / kProductLanes * kProductLanes;
}

/// \brief Query heads per KV head from which attend_span_product pays, as whole read-once steps
/// measured (`bench_shared_prefix_cpu`, 4 prompts of 8192 positions, Llama-3-8B heads, bf16):
/// - with AVX-512, 16. On a Zen 4, a step of 4 samples (16 heads) and the pass alone ran faster
///   with the products, and at 2 samples (8 heads) slower
///   (docs/results/shared-prefix-cpu-amd-epyc-zen4.md). An earlier product with blocks of 32
///   positions had run a step of 8 samples (32 heads) slower on an Emerald Rapids Xeon than
///   attend_span (docs/results/shared-prefix-cpu-intel-xeon-emerald-rapids.md); this one has not
///   been measured there;
/// - with AVX2, 16: a step of 4 samples (16 heads) took 30.7 ms against attend_span's 37.6-40.2,
///   of 8 and 16 samples 49 and 90 ms against 86 and 157; of 2 samples (8 heads, one vector) 25.4
///   against 21.3 (docs/results/shared-prefix-sweep-cpu-amd-epyc-zen3.md);
/// - elsewhere never: not measured.
#if defined(__AVX2__) && defined(__FMA__)
inline constexpr int kProductFrom = 16;
#else
inline constexpr int kProductFrom = std::numeric_limits<int>::max();
#endif

/// \brief Whether attend_span_product pays for `n_heads_q` query heads per KV head.
inline bool product_pays(int n_heads_q) { return n_heads_q >= kProductFrom; }

/// \brief Floats of scratch attend_span_product needs for `n_heads_q` query heads per KV head
/// (AttendShape::group): the queries transposed, a block of K widened, the block's scores, and a
/// running max, sum and rescaling factor per head.
inline std::size_t attend_product_scratch_floats(int n_heads_q, int head_dim) {
  const auto hp = static_cast<std::size_t>(product_heads(n_heads_q));
  const auto hd = static_cast<std::size_t>(head_dim);
  return hd * hp + kProductBlock * hd + kProductBlock * hp + 3 * hp;
}

namespace detail {

/// One vector of kProductLanes floats, its loads and stores.
using Lanes = std::conditional_t<simd::kWideDefault, simd::Vec16, simd::Vec8>;
inline Lanes load_lanes(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_lanes(float* p, Lanes v) { std::memcpy(p, &v, sizeof v); }
inline Lanes in_register(Lanes v) { return simd::in_register(v); }

/// Value tiles: heads, and vectors per head, whose accumulators and loads fit in the vector
/// registers (32 with AVX-512, 16 without): 4 x 4 + 4, or 6 x 2 + 2 and a broadcast. Without
/// AVX-512, twelve accumulators rather than eight keep both multiply-add pipes of a Zen 3 core
/// fed through their four-cycle latency: 6 x 2 measured 4-5 % faster than 4 x 2 there.
inline constexpr int kValueHeads = simd::kWideDefault ? 4 : 6;
inline constexpr int kValueVecs = simd::kWideDefault ? 4 : 2;
/// Score tiles: positions, by two vectors of heads per position, likewise: 8 x 2 + 2, or
/// 6 x 2 + 2 and a broadcast.
inline constexpr int kScorePositions = simd::kWideDefault ? 8 : 6;
/// Score tiles of one vector of heads: with AVX-512, 16 positions (16 + 1 registers), so that a
/// step of the loop does 16 multiply-adds for its one load of queries and its overhead; without,
/// as many as two vectors' tiles.
inline constexpr int kSinglePositions = simd::kWideDefault ? 16 : kScorePositions;

/// st[p][h] = k_p . q_h for kPos positions from p0 and the kVecs x kProductLanes heads from h0,
/// with qt the queries transposed ([head_dim][hp]) and kb the block's K rows
/// ([kProductBlock][head_dim]). kHd is head_dim where it is known when compiled (else 0).
/// Meanwhile it asks the caches for `n_lines` cache lines from `lines`, one every few steps.
template <int kPos, int kVecs, int kHd>
void block_scores(const float* qt, int hp, int h0, const float* kb, int p0, int head_dim, float* st,
                  const char* const* lines = nullptr, int n_lines = 0) {
  constexpr int kL = kProductLanes;
  if constexpr (kHd > 0) head_dim = kHd;
  Lanes acc[kPos][kVecs] = {};
  const int every = std::max(1, head_dim / std::max(n_lines, 1));
  // One pointer for the kPos rows, another for the queries, both stepped by d. With head_dim known
  // when compiled, the rows' offsets are constants in the multiply-adds' addresses; otherwise GCC
  // keeps a register for each, and spills some (docs/results/shared-prefix-cpu-amd-epyc-zen4.md).
  const float* k = kb + static_cast<long>(p0) * head_dim;
  const float* qd = qt + h0;
  int line = 0;
  for (int d = 0; d < head_dim;) {
    if (line < n_lines) __builtin_prefetch(lines[line++], 0, 1);
    for (const int stop = std::min(head_dim, d + every); d < stop; ++d, ++k, qd += hp) {
      Lanes q[kVecs];
      for (int j = 0; j < kVecs; ++j) q[j] = in_register(load_lanes(qd + kL * j));
      for (int p = 0; p < kPos; ++p) {
        const float x = k[static_cast<long>(p) * head_dim];
        for (int j = 0; j < kVecs; ++j) acc[p][j] += x * q[j];
      }
    }
  }
  for (; line < n_lines; ++line) __builtin_prefetch(lines[line], 0, 1);
  for (int p = 0; p < kPos; ++p)
    for (int j = 0; j < kVecs; ++j)
      store_lanes(st + static_cast<long>(p0 + p) * hp + h0 + kL * j, acc[p][j]);
}

/// kProductLanes stored elements from p, widened to fp32 in one vector (exact).
template <class T>
inline Lanes load_wide(const T* p) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, BF16Bits>) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return std::bit_cast<Lanes>(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  } else if constexpr (std::is_same_v<T, F16Bits>) {
    return std::bit_cast<Lanes>(
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  } else {
    return load_lanes(p);
  }
#else
  return simd::load8(p);
#endif
}

/// o_h[d] += sum over p < np of w[p][h] * v_p[d] for kH heads from h0, outputs [d0, d0 +
/// kProductLanes kVecs), vr[p] pointing at position p's V slice ([head_dim] elements, as stored)
/// and w being the weights ([kProductBlock][hp]). V is widened in registers, by every tile that
/// reads it: widened once into scratch instead, it was written out and read back through the L2,
/// which cost more (docs/results/shared-prefix-cpu-amd-epyc-zen4.md).
template <int kH, int kVecs, int kHd, class T>
void block_values(const float* w, int hp, int h0, int np, const T* const* vr, int head_dim, int d0,
                  float* o) {
  constexpr int kL = kProductLanes;
  if constexpr (kHd > 0) head_dim = kHd;
  Lanes acc[kH][kVecs];
  for (int h = 0; h < kH; ++h)
    for (int j = 0; j < kVecs; ++j)
      acc[h][j] = load_lanes(o + static_cast<long>(h0 + h) * head_dim + d0 + kL * j);
  for (int p = 0; p < np; ++p) {
    const T* row = vr[p] + d0;
    Lanes v[kVecs];
    for (int j = 0; j < kVecs; ++j) v[j] = in_register(load_wide(row + kL * j));
    for (int h = 0; h < kH; ++h) {
      const float x = w[static_cast<long>(p) * hp + h0 + h];
      for (int j = 0; j < kVecs; ++j) acc[h][j] += x * v[j];
    }
  }
  for (int h = 0; h < kH; ++h)
    for (int j = 0; j < kVecs; ++j)
      store_lanes(o + static_cast<long>(h0 + h) * head_dim + d0 + kL * j, acc[h][j]);
}

/// block_values for kH heads from h0 over all of head_dim: whole tiles, then single vectors, then
/// the last outputs one at a time.
template <int kH, int kHd, class T>
void block_values_all(const float* w, int hp, int h0, int np, const T* const* vr, int head_dim,
                      float* o) {
  constexpr int kL = kProductLanes;
  if constexpr (kHd > 0) head_dim = kHd;
  int d = 0;
  for (; d + kL * kValueVecs <= head_dim; d += kL * kValueVecs)
    block_values<kH, kValueVecs, kHd>(w, hp, h0, np, vr, head_dim, d, o);
  for (; d + kL <= head_dim; d += kL) block_values<kH, 1, kHd>(w, hp, h0, np, vr, head_dim, d, o);
  for (; d < head_dim; ++d)
    for (int h = h0; h < h0 + kH; ++h) {
      float a = o[static_cast<long>(h) * head_dim + d];
      for (int p = 0; p < np; ++p) a += w[static_cast<long>(p) * hp + h] * simd::load1(vr[p] + d);
      o[static_cast<long>(h) * head_dim + d] = a;
    }
}

/// dst[0, n) = the n stored elements at src, widened to fp32 a vector at a time where they can.
template <class T>
void widen(const T* src, int n, float* dst) {
  int d = 0;
  for (; d + kProductLanes <= n; d += kProductLanes) store_lanes(dst + d, load_wide(src + d));
  for (; d < n; ++d) dst[d] = simd::load1(src + d);
}

/// Cache lines a slice of `bytes` bytes can touch: one more than it fills when it does not start
/// on a line.
inline long lines_per_slice(long bytes) { return (bytes + kCacheLine - 1) / kCacheLine + 1; }

/// Appends to `lines` the cache lines that [p, p + bytes) touches, each once.
inline void append_lines(const char* p, long bytes, const char** lines, int& n) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t first = at / kCacheLine, last = (at + bytes - 1) / kCacheLine;
  for (std::uintptr_t line = first; line <= last; ++line)
    lines[n++] = p + static_cast<long>(line * kCacheLine - at);
}

/// The cache lines of KV head slice [head_off, head_off + head_dim) of positions [t, end)'s K and
/// V rows, into `lines` (room for 2 (end - t) lines_per_slice(head_dim sizeof(T))); returns how
/// many.
template <class T, class Rows>
int slice_lines(const Rows& rows, int t, int end, long head_off, int head_dim, const char** lines) {
  const long bytes = static_cast<long>(head_dim) * static_cast<long>(sizeof(T));
  int n = 0;
  for (; t < end; ++t) {
    append_lines(reinterpret_cast<const char*>(rows.k(t) + head_off), bytes, lines, n);
    append_lines(reinterpret_cast<const char*>(rows.v(t) + head_off), bytes, lines, n);
  }
  return n;
}

}  // namespace detail

/// \brief attend_span computed as tiled products: unnormalised attention of every query head of
/// KV heads [kv_begin, kv_end) over positions [t_begin, t_end), for many query heads per KV head.
///
/// \param q        [n_heads, head_dim] queries; KV head g's sh.group heads from g * group on
/// \param rows     accessor: rows.k(t) and rows.v(t) point at position t's [n_kv_heads, head_dim]
/// \param acc      [n_heads, head_dim] written for the range's heads: sum of exp(s - max) * v
/// \param max      [n_q] written, n_q = (kv_end - kv_begin) * group: each head's largest scaled
///                 score (-inf if the span is empty)
/// \param sum      [n_q] written: sum of exp(s - max) per head
/// \param scratch  attend_product_scratch_floats(sh.group, head_dim) floats
///
/// The same contract as attend_span, so the two are interchangeable, within rounding.
template <class T, class Rows>
void attend_span_product(const float* q, const Rows& rows, int t_begin, int t_end,
                         const AttendShape& sh, int kv_begin, int kv_end, float* acc, float* max,
                         float* sum, float* scratch);

namespace detail {

/// attend_span_product for head_dim kHd, or any head_dim where kHd is 0.
template <int kHd, class T, class Rows>
void attend_span_product_at(const float* q, const Rows& rows, int t_begin, int t_end,
                            const AttendShape& sh, int kv_begin, int kv_end, float* acc, float* max,
                            float* sum, float* scratch) {
  constexpr int kP = kProductBlock, kL = kProductLanes;
  const int n_q = sh.group, hd = kHd > 0 ? kHd : sh.head_dim, hp = product_heads(n_q);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* qt = scratch;                          // [hd][hp] queries transposed
  float* kb = qt + static_cast<long>(hd) * hp;  // [kP][hd] the block's K, widened
  float* st = kb + static_cast<long>(kP) * hd;  // [kP][hp] scores, then weights
  float* m = st + static_cast<long>(kP) * hp;   // [hp] running max
  float* l = m + hp;                            // [hp] running sum
  float* factor = l + hp;                       // [hp] this block's rescaling
  // A block reads 1 / n_kv_heads of each of its rows, a pattern the hardware prefetchers of a Zen
  // 3 core follow badly: a pass over rows in memory took 1.2x (64 heads) to 1.8x (16 heads) the
  // same pass over rows in cache (docs/results/shared-prefix-sweep-cpu-amd-epyc-zen3.md). Where
  // prefetching helps (prefetch_helps), the next block's cache lines are asked for while the score
  // tiles run, one every few steps of their loops: all of them asked for at once measured no
  // faster, as if most of the requests were dropped, and a few rows per tile (bursts of 48 lines at
  // 16 heads) half as good. They go to the L2, as attend_span's do: a block's rows are twice the
  // L1, and asked into it they evicted the widened K the tiles were reading
  // (docs/results/shared-prefix-cpu-amd-epyc-zen4.md; measured on a Zen 4 only).
  static_assert(kP % kScorePositions == 0 && kP % kSinglePositions == 0,
                "a block is a whole number of score tiles");
  const bool prefetch = prefetch_helps() && n_q > 0;
  const int tiles =
      hp / (2 * kL) * (kP / kScorePositions) + hp % (2 * kL) / kL * (kP / kSinglePositions);
  std::vector<const T*> vrows(kP);  // the block's V slices, as stored
  std::vector<const char*> lines(
      prefetch ? 2 * kP * lines_per_slice(static_cast<long>(hd) * sizeof(T)) : 0);
  for (int g = kv_begin; g < kv_end; ++g) {
    const long head_off = static_cast<long>(g) * hd;
    const float* qg = q + static_cast<long>(g) * n_q * hd;
    float* og = acc + static_cast<long>(g) * n_q * hd;
    for (int d = 0; d < hd; ++d)  // heads past n_q are zeros: their scores are 0, never stored
      for (int h = 0; h < hp; ++h)
        qt[static_cast<long>(d) * hp + h] = h < n_q ? qg[static_cast<long>(h) * hd + d] : 0.0f;
    std::fill(og, og + static_cast<long>(n_q) * hd, 0.0f);
    std::fill(m, m + hp, -std::numeric_limits<float>::infinity());
    std::fill(l, l + hp, 0.0f);
    for (int t0 = t_begin; t0 < t_end; t0 += kP) {
      const int np = std::min(kP, t_end - t0);
      for (int p = 0; p < np; ++p) {
        widen(rows.k(t0 + p) + head_off, hd, kb + static_cast<long>(p) * hd);
        vrows[p] = rows.v(t0 + p) + head_off;
      }
      // Scores: heads in pairs of vectors while they last, positions in tiles of kScorePositions;
      // a last single vector of heads in tiles of kSinglePositions, then of kScorePositions; the
      // last few positions one at a time. The first tiles of each kind share out the next
      // block's cache lines to prefetch (see above); in a KV head's last block, those of the next
      // KV head's first block, which would otherwise start from memory (a small gain:
      // docs/results/shared-prefix-cpu-amd-epyc-zen4.md). A short last block runs fewer tiles
      // than it was given lines for: it asks for the rest after them.
      int n_lines = 0;
      if (prefetch && t0 + kP < t_end) {
        n_lines =
            slice_lines<T>(rows, t0 + kP, std::min(t_end, t0 + 2 * kP), head_off, hd, lines.data());
      } else if (prefetch && g + 1 < kv_end) {
        n_lines = slice_lines<T>(rows, t_begin, std::min(t_end, t_begin + kP), head_off + hd, hd,
                                 lines.data());
      }
      const int per_tile = (n_lines + tiles - 1) / std::max(tiles, 1);
      int line = 0;
      for (int h = 0; h < hp; h += kL) {
        const bool two = h + 2 * kL <= hp;
        const int step = two ? kScorePositions : kSinglePositions;
        int p = 0;
        for (; p + step <= np; p += step) {
          const int n = std::min(per_tile, n_lines - line);
          if (two) {
            block_scores<kScorePositions, 2, kHd>(qt, hp, h, kb, p, hd, st, lines.data() + line, n);
          } else {
            block_scores<kSinglePositions, 1, kHd>(qt, hp, h, kb, p, hd, st, lines.data() + line,
                                                   n);
          }
          line += n;
        }
        for (; !two && p + kScorePositions <= np; p += kScorePositions)
          block_scores<kScorePositions, 1, kHd>(qt, hp, h, kb, p, hd, st);
        for (; p < np; ++p) {
          if (two) {
            block_scores<1, 2, kHd>(qt, hp, h, kb, p, hd, st);
          } else {
            block_scores<1, 1, kHd>(qt, hp, h, kb, p, hd, st);
          }
        }
        if (two) h += kL;
      }
      for (; line < n_lines; ++line) __builtin_prefetch(lines[line], 0, 1);
      // The online softmax, kL heads at a time: the block's weights replace its scores.
      for (int h = 0; h < hp; h += kL) {
        Lanes top = load_lanes(st + h);
        for (int p = 1; p < np; ++p) {
          const Lanes x = load_lanes(st + static_cast<long>(p) * hp + h);
          top = top > x ? top : x;
        }
        const Lanes old = load_lanes(m + h);
        top *= scale;
        const Lanes grown = old > top ? old : top;
        // -inf on the first block: its factor 0
        const Lanes f = simd::exp_nonpositive(old - grown);
        Lanes total = {};
        for (int p = 0; p < np; ++p) {
          float* row = st + static_cast<long>(p) * hp + h;
          const Lanes weight = simd::exp_nonpositive(load_lanes(row) * scale - grown);
          total += weight;
          store_lanes(row, weight);
        }
        store_lanes(l + h, load_lanes(l + h) * f + total);
        store_lanes(m + h, grown);
        store_lanes(factor + h, f);
      }
      for (int h = 0; h < n_q; ++h)
        if (factor[h] != 1.0f) {
          float* o = og + static_cast<long>(h) * hd;
          for (int d = 0; d < hd; ++d) o[d] *= factor[h];
        }
      int h = 0;
      for (; h + kValueHeads <= n_q; h += kValueHeads)
        block_values_all<kValueHeads, kHd>(st, hp, h, np, vrows.data(), hd, og);
      for (; h + 4 <= n_q; h += 4) block_values_all<4, kHd>(st, hp, h, np, vrows.data(), hd, og);
      for (; h + 2 <= n_q; h += 2) block_values_all<2, kHd>(st, hp, h, np, vrows.data(), hd, og);
      for (; h < n_q; ++h) block_values_all<1, kHd>(st, hp, h, np, vrows.data(), hd, og);
    }
    std::copy(m, m + n_q, max + static_cast<long>(g - kv_begin) * n_q);
    std::copy(l, l + n_q, sum + static_cast<long>(g - kv_begin) * n_q);
  }
}

}  // namespace detail

template <class T, class Rows>
void attend_span_product(const float* q, const Rows& rows, int t_begin, int t_end,
                         const AttendShape& sh, int kv_begin, int kv_end, float* acc, float* max,
                         float* sum, float* scratch) {
  // The common head sizes compiled for their own (see block_scores).
  const auto at = sh.head_dim == 128  ? detail::attend_span_product_at<128, T, Rows>
                  : sh.head_dim == 64 ? detail::attend_span_product_at<64, T, Rows>
                                      : detail::attend_span_product_at<0, T, Rows>;
  at(q, rows, t_begin, t_end, sh, kv_begin, kv_end, acc, max, sum, scratch);
}

}  // namespace kvheap::cpu
