// Causal grouped-query attention of query rows over cached K/V rows: the CPU twin of
// kernels/decode_attention.cu.
//
// The cache layout is hidden behind a row accessor, so that every policy (contiguous reservation,
// paged blocks, shared prefixes) runs the same arithmetic in the same order; only where a
// position's K and V rows live differs. That is what makes paged results bitwise equal to
// contiguous ones on the same device. The algorithm is the kernel's: one pass with an online
// softmax, and long contexts split into chunks merged by log-sum-exp (attend_batch below).
//
// Decode attention does a multiply-add or two per element it reads, so the loops must run near
// the cores' multiply-add peak to keep up with memory: positions in tiles of eight, query heads in
// fours, accumulators in registers (decode_attention_simd.hpp), and tiles that read each 4 KiB page
// front to back so that the hardware prefetchers keep up. docs/pages/cpu_twin.md explains each
// choice and what it measured.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/attention_merge.hpp"
#include "kernels/decode_attention_simd.hpp"
#include "kernels/kv_types.hpp"

namespace kvheap::cpu {

/// \brief Positions attend_kv_heads handles together.
inline constexpr int kAttendTile = simd::kLanes;

/// \brief The page size the x86 hardware prefetchers track streams in.
inline constexpr long kPageBytes = 4096;
/// \brief How many spans of tiles ahead attend_span prefetches, one KV head's slice at a time,
/// when rows are shorter than a page. Rows of a page or more each get their own page stream,
/// which the hardware prefetchers follow unaided; prefetching them too only costs instructions.
inline constexpr int kPrefetchSpans = 2;
/// \brief Bytes per prefetch: the x86 and most ARM cache line.
inline constexpr long kCacheLine = 64;

/// \brief Head geometry of the cache rows the twin reads.
struct AttendShape {
  int n_kv_heads;  ///< KV heads per cached position: a row holds all of them
  int group;       ///< query heads per KV head
  int head_dim;    ///< elements per head

  /// \brief Query heads: n_kv_heads x group.
  [[nodiscard]] int n_heads() const { return n_kv_heads * group; }
  /// \brief Elements of one row's queries: n_heads x head_dim.
  [[nodiscard]] int q_dim() const { return n_heads() * head_dim; }
};

/// \brief Floats of scratch attend_span needs for `n_heads_q` query heads: their queries in the
/// cache type's block order, and a tile of weights for each of four heads. It does not grow with
/// the context.
inline std::size_t attend_span_scratch_floats(int n_heads_q, int head_dim) {
  return static_cast<std::size_t>(n_heads_q) * head_dim + 4 * kAttendTile;
}

/// \brief Floats of scratch attend_kv_heads needs for `n_heads_q` query heads: a running max and
/// a running sum per head, and attend_span's scratch.
inline std::size_t attend_scratch_floats(int n_heads_q, int head_dim) {
  return 2 * static_cast<std::size_t>(n_heads_q) + attend_span_scratch_floats(n_heads_q, head_dim);
}

/// \brief How far apart a tile's positions are when a span of `n_positions` rows of `row_bytes`
/// each is read: 4096 / row_bytes (one row per 4 KiB page), at least 1, at most a tile, and no
/// more than keeps the tiles full. It depends on the shape and the span alone, never on where
/// rows live, so every layout visits positions in the same order.
inline int tile_stride(long row_bytes, int n_positions) {
  const long by_page = std::clamp(kPageBytes / std::max(row_bytes, 1L), 1L, long{kAttendTile});
  return static_cast<int>(std::min(by_page, std::max(1L, long{n_positions} / kAttendTile)));
}

/// \brief Whether attend_span takes the KV heads of a model with one query head per KV head
/// (multi-head attention, the stories models) up to four at a time (tile_heads' kSplit): where
/// the loops run on 8-float vectors. One head at a time, a tile's loops are a chain of dependent
/// steps (dot products, their sums, the softmax, the weighted sum) that leaves the multiply-add
/// units mostly idle; four heads' independent calls and one softmax step for the four keep more of
/// them busy (docs/pages/cpu_twin.md). Every head gets bitwise what it gets alone. The 16-float
/// loops (AVX-512) still take one head at a time: there, four at a time barely paid
/// (docs/results/matmul-cpu-amd-epyc-zen4.md).
inline constexpr bool kSplitHeads = !simd::kWideDefault;

/// \brief Whether software prefetches help the attention loops at all: not on Intel CPUs, whose
/// hardware prefetchers follow the tiles' page streams unaided, so that prefetch instructions only
/// get in their way (measured on two machines: docs/pages/cpu_twin.md).
inline bool prefetch_helps() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool helps = !__builtin_cpu_is("intel");
  return helps;
#else
  return true;
#endif
}

/// \brief Whether attend_span prefetches rows shorter than a page itself: where prefetch_helps(),
/// except on Zen 3, where a tile's prefetches made the bf16 twin slower though they made it faster
/// on a Zen 4 (docs/pages/cpu_twin.md, docs/results/cpu-amd-epyc-zen3.md). The prefix product's
/// prefetches (attend_span_product), which walk one KV head's slice of a span, still pay on Zen 3.
inline bool span_prefetch_helps() {
#if defined(__x86_64__) && defined(__GNUC__)
  // GCC 12 knows no Zen 4 and names one "znver3" too; a Zen 3 has no AVX-512, a Zen 4 has.
  static const bool helps =
      prefetch_helps() && !(__builtin_cpu_is("znver3") && !__builtin_cpu_supports("avx512f"));
  return helps;
#else
  return prefetch_helps();
#endif
}

namespace detail {

/// o_j += sum over the first nt rows of w_j[p] * v[p] for kHeads heads, w_j = w + j * kTile.
template <int kHeads, class T>
void heads_accumulate(const float* w, const T* const* v, int nt, int head_dim, float* o) {
  if (nt == kAttendTile) {
    simd::accumulate_block<kHeads, kAttendTile>(w, kAttendTile, v, nt, head_dim, o);
  } else {
    simd::accumulate_block<kHeads, 0>(w, kAttendTile, v, nt, head_dim, o);
  }
}

/// One head's scores for a tile (simd::scores_tile<1>), out of line: a head alone and a head
/// whose KV head goes beside others (tile_heads' kSplit) run the very same instructions, so that
/// no choice of the compiler (which multiply-adds it fuses, loop by loop) can tell them apart.
template <class T>
[[gnu::noinline]] void scores_one(const float* q, const T* const* k, int head_dim, simd::Vec8* s) {
  simd::scores_tile<1>(q, k, head_dim, s);
}

/// One head's weighted sum for a tile (heads_accumulate<1>), out of line, for the same reason.
template <class T>
[[gnu::noinline]] void accumulate_one(const float* w, const T* const* v, int nt, int head_dim,
                                      float* o) {
  heads_accumulate<1>(w, v, nt, head_dim, o);
}

/// One tile for kHeads query heads of one KV head: scores, the online-softmax step, and the
/// weighted sum of V into o. q, m, l and o are the first of the kHeads heads; w is scratch for
/// kHeads tiles of weights. kSplit: kHeads consecutive KV heads of one query head each instead,
/// head j reading k[p] + j * head_dim and v[p] + j * head_dim. Their scores and weighted sums run
/// head by head through the same functions as a head alone (scores_one, accumulate_one), and their
/// softmax steps side by side (softmax_tile gives each head the same numbers whichever heads share
/// it), so each head gets bitwise what it gets alone.
template <int kHeads, class T, bool kSplit = false>
void tile_heads(const float* q, const T* const* k, const T* const* v, int nt, int head_dim,
                float scale, float* m, float* l, float* w, float* o) {
  constexpr bool kOneByOne = kHeads == 1 || kSplit;
  simd::Vec8 s[kHeads];
  float factor[kHeads];
  const T* rows[kAttendTile];  // with kSplit, head j's part of the rows
  const auto part = [&](const T* const* r, int j) -> const T* const* {
    if constexpr (!kSplit) return r;
    for (int p = 0; p < kAttendTile; ++p) rows[p] = r[p] + j * head_dim;
    return rows;
  };
  if constexpr (kOneByOne) {
    for (int j = 0; j < kHeads; ++j) scores_one(q + j * head_dim, part(k, j), head_dim, s + j);
  } else {
    simd::scores_tile<kHeads>(q, k, head_dim, s);
  }
  simd::softmax_tile<kHeads>(s, nt, scale, m, l, factor);
  for (int j = 0; j < kHeads; ++j) {
    simd::store8(w + j * kAttendTile, s[j]);
    if (factor[j] != 1.0f)  // the max grew: rescale what was accumulated so far
      for (int d = 0; d < head_dim; ++d) o[j * head_dim + d] *= factor[j];
  }
  if constexpr (kOneByOne) {
    for (int j = 0; j < kHeads; ++j)
      accumulate_one(w + j * kAttendTile, part(v, j), nt, head_dim, o + j * head_dim);
  } else {
    heads_accumulate<kHeads>(w, v, nt, head_dim, o);
  }
}

/// One tile for the `group` query heads of one KV head (q, m, l, o at the group's first head),
/// four heads at a time where they can: each loaded K or V vector then serves four.
template <class T>
void tile_group(const float* q, const T* const* k, const T* const* v, int nt, int group,
                int head_dim, float scale, float* m, float* l, float* w, float* o) {
  const auto at = [head_dim](auto* base, int j) { return base + static_cast<long>(j) * head_dim; };
  int j = 0;
  for (; j + 4 <= group; j += 4)
    tile_heads<4>(at(q, j), k, v, nt, head_dim, scale, m + j, l + j, w, at(o, j));
  for (; j + 2 <= group; j += 2)
    tile_heads<2>(at(q, j), k, v, nt, head_dim, scale, m + j, l + j, w, at(o, j));
  for (; j < group; ++j)
    tile_heads<1>(at(q, j), k, v, nt, head_dim, scale, m + j, l + j, w, at(o, j));
}

/// The start of a span for n_q heads: outputs o [n_q, head_dim] zeroed, every max at -inf and
/// every sum at 0. Returns the queries q [n_q, head_dim] in T's block order: copied into qb and
/// reordered where T loads interleaved, else q itself.
template <class T>
const float* begin_span(const float* q, int n_q, int head_dim, float* o, float* max, float* sum,
                        float* qb) {
  const long elems = static_cast<long>(n_q) * head_dim;
  if constexpr (simd::kInterleaved<T>) {
    std::copy(q, q + elems, qb);
    for (int h = 0; h < n_q; ++h)
      simd::to_block_order<T>(qb + static_cast<long>(h) * head_dim, head_dim);
    q = qb;
  }
  std::fill(o, o + elems, 0.0f);
  std::fill(max, max + n_q, -std::numeric_limits<float>::infinity());
  std::fill(sum, sum + n_q, 0.0f);
  return q;
}

}  // namespace detail

/// \brief Unnormalised attention of one query row over positions [t_begin, t_end), for KV heads
/// [kv_begin, kv_end) and their query groups: a partial softmax state per head, to be finished
/// (acc / sum) or merged with other spans'.
///
/// \param q        [n_heads, head_dim] the row's queries; heads kv_begin * group onwards are read
/// \param rows     accessor: rows.k(t) and rows.v(t) point at position t's [n_kv_heads, head_dim]
/// \param acc      [n_heads, head_dim] written for the range's heads: sum of exp(s - max) * v
/// \param max      [n_q] written, n_q = (kv_end - kv_begin) * group, one per head of the range:
///                 its largest scaled score (-inf if the span is empty)
/// \param sum      [n_q] written: sum of exp(s - max) per head of the range
/// \param scratch  attend_span_scratch_floats(n_q, head_dim) floats
///
/// Each tile's K and V rows are read once for the whole query group (grouped-query aware), while
/// they are in cache, and nothing the size of the span is stored. All arithmetic is fp32, and
/// every reduction has an order fixed by the shape and the span alone. The queries and outputs
/// are held in T's block order (simd::to_block_order) while the span runs; acc is written in
/// natural order. Rows shorter than a page are prefetched where span_prefetch_helps().
template <class T, class Rows>
void attend_span(const float* q, const Rows& rows, int t_begin, int t_end, const AttendShape& sh,
                 int kv_begin, int kv_end, float* acc, float* max, float* sum, float* scratch);

/// \brief attend_span with its prefetches of rows shorter than a page on or off as `prefetch`
/// says, whatever the machine: bitwise the same results either way, and no position outside the
/// span asked for. (Tests run both, so that each machine runs the path it does not choose.)
template <class T, class Rows>
void attend_span_prefetching(bool prefetch, const float* q, const Rows& rows, int t_begin,
                             int t_end, const AttendShape& sh, int kv_begin, int kv_end, float* acc,
                             float* max, float* sum, float* scratch) {
  constexpr int kTile = kAttendTile;
  const int group = sh.group, head_dim = sh.head_dim;
  const long h_begin = static_cast<long>(kv_begin) * group;  // first query head of the range
  const int n_q = (kv_end - kv_begin) * group;
  float* o = acc + h_begin * head_dim;  // [n_q, head_dim]
  float* w = scratch;                   // [4, kTile] weights
  q = detail::begin_span<T>(q + h_begin * head_dim, n_q, head_dim, o, max, sum,
                            scratch + 4 * kTile);  // [n_q, head_dim]
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const long row_bytes = static_cast<long>(sh.n_kv_heads) * head_dim * static_cast<long>(sizeof(T));
  const int stride = tile_stride(row_bytes, t_end - t_begin);
  prefetch = prefetch && row_bytes < kPageBytes;
  const T* k_rows[kTile];  // the tile's rows: one accessor call per position, not per head
  const T* v_rows[kTile];
  const T* k_head[kTile];  // one KV head's part of them
  const T* v_head[kTile];
  const char* k_ahead[kTile];
  const char* v_ahead[kTile];

  // Spans of stride * 8 positions; tile s of a span takes positions s, s + stride, s + 2 stride...
  for (int b0 = t_begin; b0 < t_end; b0 += stride * kTile) {
    for (int t0 = b0; t0 < std::min(b0 + stride, t_end); ++t0) {
      const int nt = std::min(kTile, (t_end - t0 + stride - 1) / stride);  // a short tile repeats
      for (int p = 0; p < kTile; ++p) {                                    // its last row
        k_rows[p] = rows.k(t0 + stride * std::min(p, nt - 1));
        v_rows[p] = rows.v(t0 + stride * std::min(p, nt - 1));
      }
      // The same tile two spans on, to be prefetched head by head below (short rows only).
      const int ta = t0 + kPrefetchSpans * stride * kTile;
      int na = 0;
      for (; prefetch && na < kTile && ta + stride * na < t_end; ++na) {
        k_ahead[na] = reinterpret_cast<const char*>(rows.k(ta + stride * na));
        v_ahead[na] = reinterpret_cast<const char*>(rows.v(ta + stride * na));
      }
      // KV heads one at a time with their query groups or, with one query head each, up to
      // four at a time (kv_step of them).
      for (int g = kv_begin, kv_step = 1; g < kv_end; g += kv_step) {
        kv_step = group > 1 || !kSplitHeads ? 1 : kv_end - g >= 4 ? 4 : kv_end - g >= 2 ? 2 : 1;
        const long head_off = static_cast<long>(g) * head_dim;
        const long first = head_off * static_cast<long>(sizeof(T));  // these heads' bytes
        const long last = first + kv_step * head_dim * static_cast<long>(sizeof(T));
        for (int p = 0; p < na; ++p)
          for (long b = first; b < last; b += kCacheLine) {
            __builtin_prefetch(k_ahead[p] + b, 0, 1);  // read, low locality: into L2, not L1
            __builtin_prefetch(v_ahead[p] + b, 0, 1);
          }
        for (int p = 0; p < kTile; ++p) k_head[p] = k_rows[p] + head_off;
        for (int p = 0; p < kTile; ++p) v_head[p] = v_rows[p] + head_off;
        const int h0 = (g - kv_begin) * group;  // the group's first head in the range
        const float* qh = q + static_cast<long>(h0) * head_dim;
        float* oh = o + static_cast<long>(h0) * head_dim;
        if constexpr (kSplitHeads) {
          if (kv_step == 4) {
            detail::tile_heads<4, T, true>(qh, k_head, v_head, nt, head_dim, scale, max + h0,
                                           sum + h0, w, oh);
            continue;
          }
          if (kv_step == 2) {
            detail::tile_heads<2, T, true>(qh, k_head, v_head, nt, head_dim, scale, max + h0,
                                           sum + h0, w, oh);
            continue;
          }
        }
        detail::tile_group(qh, k_head, v_head, nt, group, head_dim, scale, max + h0, sum + h0, w,
                           oh);
      }
    }
  }
  for (int h = 0; h < n_q; ++h)
    simd::from_block_order<T>(o + static_cast<long>(h) * head_dim, head_dim);
}

template <class T, class Rows>
void attend_span(const float* q, const Rows& rows, int t_begin, int t_end, const AttendShape& sh,
                 int kv_begin, int kv_end, float* acc, float* max, float* sum, float* scratch) {
  attend_span_prefetching<T>(span_prefetch_helps(), q, rows, t_begin, t_end, sh, kv_begin, kv_end,
                             acc, max, sum, scratch);
}

/// \brief Floats of scratch attend_span_rows needs for `n_rows` rows of `n_heads_q` query heads
/// each: their queries in the cache type's block order, and a tile of weights for four heads.
inline std::size_t attend_span_rows_scratch_floats(int n_rows, int n_heads_q, int head_dim) {
  return attend_span_scratch_floats(n_rows * n_heads_q, head_dim);
}

/// \brief attend_span for several query rows that read the same cache rows (a prompt chunk of one
/// sequence), each over its own span [t_begin, t_end[m]): bitwise what attend_span gives each row
/// alone, with each tile's K and V rows read once for all the rows it is whole for.
///
/// \param q        the rows' queries by KV head: head g * group + j of row m, for g in [kv_begin,
///                 kv_end), at ((g - kv_begin) * n_rows + m) * group + j, head_dim floats each
/// \param t_end    [n_rows] where each row's span ends, ascending (causal rows of one sequence)
/// \param acc      the same layout as q, written: sum of exp(s - max) * v
/// \param max      [(kv_end - kv_begin) * n_rows * group] in the same order, written
/// \param sum      likewise
/// \param scratch  attend_span_rows_scratch_floats(n_rows, (kv_end - kv_begin) * group, head_dim)
///
/// A prompt chunk's rows attend over nearly the same positions, so most of a row's tiles are
/// whole tiles the others have too. Those go through the inner loops once for every row that has
/// them, the rows' heads side by side, as a larger query group: one loaded K or V vector then
/// serves four heads of any rows, where a model with one query head per KV head (the stories
/// models) gets one use out of it row by row. A row's last tiles, those its span ends in, go as
/// attend_span would take them, row by row. Each head's tiles come in the order attend_span takes
/// them, with the same positions, and the inner loops give every head the same numbers whichever
/// heads share its calls, so the rows' results are bitwise those of attend_span: prompts, chunked
/// prompts and decoding all give the same bits (tier 1).
template <class T, class Rows>
void attend_span_rows(const float* q, int n_rows, const Rows& rows, int t_begin, const int* t_end,
                      const AttendShape& sh, int kv_begin, int kv_end, float* acc, float* max,
                      float* sum, float* scratch) {
  constexpr int kTile = kAttendTile;
  const int group = sh.group, head_dim = sh.head_dim;
  const int n_q = (kv_end - kv_begin) * n_rows * group;
  float* w = scratch;  // [4, kTile] weights
  q = detail::begin_span<T>(q, n_q, head_dim, acc, max, sum, scratch + 4 * kTile);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const long row_bytes = static_cast<long>(sh.n_kv_heads) * head_dim * static_cast<long>(sizeof(T));
  // Row m's first head of KV head g: its queries, outputs and softmax state sit there.
  const auto at = [&](int g, int m) {
    return (static_cast<long>(g - kv_begin) * n_rows + m) * group;
  };
  const T* k_rows[kTile];
  const T* v_rows[kTile];
  const T* k_head[kTile];
  const T* v_head[kTile];
  // One tile of nt positions from t0, `stride` apart (a short tile repeats its last row), for the
  // rows' heads from `first`, `count` rows' worth.
  const auto tile = [&](int t0, int stride, int nt, int first, int count) {
    for (int p = 0; p < kTile; ++p) {
      k_rows[p] = rows.k(t0 + stride * std::min(p, nt - 1));
      v_rows[p] = rows.v(t0 + stride * std::min(p, nt - 1));
    }
    for (int g = kv_begin; g < kv_end; ++g) {
      const long head_off = static_cast<long>(g) * head_dim;
      for (int p = 0; p < kTile; ++p) k_head[p] = k_rows[p] + head_off;
      for (int p = 0; p < kTile; ++p) v_head[p] = v_rows[p] + head_off;
      const long h0 = at(g, first);
      detail::tile_group(q + h0 * head_dim, k_head, v_head, nt, count * group, head_dim, scale,
                         max + h0, sum + h0, w, acc + h0 * head_dim);
    }
  };
  // A row's tile stride grows with its span (tile_stride), so rows of one stride are a range.
  for (int lo = 0, hi = 0; lo < n_rows; lo = hi) {
    const int stride = tile_stride(row_bytes, t_end[lo] - t_begin);
    for (hi = lo + 1; hi < n_rows && tile_stride(row_bytes, t_end[hi] - t_begin) == stride;) ++hi;
    const int last = t_end[hi - 1];
    int live = lo;  // rows before `live` have ended; t0 only grows, so it only advances
    for (int b0 = t_begin; b0 < last; b0 += stride * kTile) {
      for (int t0 = b0; t0 < std::min(b0 + stride, last); ++t0) {
        while (live < hi && t_end[live] <= t0) ++live;
        int whole = live;  // rows from here on have the whole tile
        while (whole < hi && t_end[whole] <= t0 + (kTile - 1) * stride) ++whole;
        for (int m = live; m < whole; ++m)  // the tile a row's span ends in: that row alone
          tile(t0, stride, (t_end[m] - t0 + stride - 1) / stride, m, 1);
        if (whole < hi) tile(t0, stride, kTile, whole, hi - whole);
      }
    }
  }
  for (int h = 0; h < n_q; ++h)
    simd::from_block_order<T>(acc + static_cast<long>(h) * head_dim, head_dim);
}

/// \brief Turns one head's unnormalised output into the attention output: acc / sum, or zeros
/// for an empty context (sum = 0).
inline void finish_head(float* acc, float sum, int head_dim) {
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int d = 0; d < head_dim; ++d) acc[d] *= inv;
}

/// \brief Attention of one query row over positions [0, n_ctx), for KV heads [kv_begin, kv_end)
/// and their query groups.
///
/// \param q        [n_heads, head_dim] the row's queries; heads kv_begin * group onwards are read
/// \param rows     accessor: rows.k(t) and rows.v(t) point at position t's [n_kv_heads, head_dim]
/// \param out      [n_heads, head_dim] the row's output; the same heads are written
/// \param scratch  attend_scratch_floats((kv_end - kv_begin) * group, head_dim) floats
///
/// attend_span over the whole context, normalised. Any layout and any head range give bitwise the
/// same result for a head; an empty context gives zeros.
template <class T, class Rows>
void attend_kv_heads(const float* q, const Rows& rows, int n_ctx, const AttendShape& sh,
                     int kv_begin, int kv_end, float* out, float* scratch) {
  const int n_q = (kv_end - kv_begin) * sh.group;
  const float* sum = scratch + n_q;
  attend_span<T>(q, rows, 0, n_ctx, sh, kv_begin, kv_end, out, scratch, scratch + n_q,
                 scratch + 2 * n_q);
  float* o = out + static_cast<long>(kv_begin) * sh.group * sh.head_dim;  // [n_q, head_dim]
  for (int h = 0; h < n_q; ++h)
    finish_head(o + static_cast<long>(h) * sh.head_dim, sum[h], sh.head_dim);
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
  /// \brief Whether two accessors read the same rows.
  bool operator==(const ContiguousRows&) const = default;
};

/// \brief How uneven the threads' shares of attend_batch's work items may be before the items are
/// cut into KV-head ranges: 1.25x an even share, which keeps 5 items or more whole on 2 threads.
/// An item of a range reads only that part of each of its rows: 17 rows of Llama-3-8B's bf16
/// heads ran 1.13-1.42x faster whole than in halves, where an even count needed the cut
/// (docs/results/matmul-cpu-amd-epyc-zen4.md).
inline constexpr double kRangeSlack = 1.25;

/// \brief KV-head ranges to cut each of `items` work items into for `threads` threads: the fewest,
/// a divisor of n_kv_heads, that give every thread an item and leave none more than `slack` times
/// an even share of the work, counting the items as equal. With `slack` 1, the fewest that give
/// every thread the same number of items. Bits do not depend on it: a head gets the same result in
/// any range.
inline int head_ranges(long items, long threads, int n_kv_heads, double slack) {
  for (int r = 1; r < n_kv_heads; ++r) {
    if (n_kv_heads % r != 0) continue;
    const long shares = items * r;                       // items after the cut
    const long most = (shares + threads - 1) / threads;  // the busiest thread's
    if (shares >= threads && static_cast<double>(most) * static_cast<double>(threads) <=
                                 slack * static_cast<double>(shares))
      return r;
  }
  return n_kv_heads;
}

/// \brief Positions per work item of attend_batch: longer contexts are split into chunks of this
/// many positions and merged by log-sum-exp, whatever the thread count.
inline constexpr int kAttendChunk = 2048;

/// \brief Most rows of one prompt chunk attend_batch hands to attend_span_rows together. More
/// rows share each tile, fewer items share out over the threads; the items of a 128-row prompt
/// chunk then still outnumber the threads four to one.
inline constexpr int kRunRows = 16;

/// \brief Fewest positions the first row of a run attends to: four tiles. Rows of shorter
/// contexts share few whole tiles, too few to pay for copying their queries and outputs
/// (docs/results/prefill-attention-cpu-intel-xeon-emerald-rapids.md), so they go row by row.
inline constexpr int kRunMinContext = 4 * kAttendTile;

/// \brief Whether attend_batch forms runs of rows for heads of this shape: unless each KV head has
/// four query heads or a multiple of four, which fill the inner loops' calls of four heads
/// (detail::tile_group) row by row already. Runs would then only add the copies in and out, and
/// measured slower (docs/results/prefill-attention-cpu-intel-xeon-emerald-rapids.md).
inline bool runs_pay(const AttendShape& sh) { return sh.group % 4 != 0; }

/// \brief attend_kv_heads for every row of a batch, in parallel when the work pays for threads.
///
/// \param rows_of   rows_of(i) is batch row i's accessor (must not throw); where accessors
///                  compare equal, they must address the same rows
/// \param n_ctx_of  n_ctx_of(i) is how many positions batch row i attends to
/// \param q         [n, n_heads, head_dim]
/// \param out       [n, n_heads, head_dim] written
///
/// A work item is a chunk of a row's context (kAttendChunk positions; the whole row when it is
/// shorter) and a range of its KV heads: whole rows when there are enough chunks to keep the
/// threads evenly busy (one item then reads all of each position's row, page by page), else each
/// chunk split into just enough head ranges (head_ranges). A row of several chunks is merged by
/// log-sum-exp in chunk order afterwards. The chunks are fixed by the context length, not by the
/// thread count, so the numbers are the same with any number of threads. Every CPU cache policy
/// calls this with its own accessor, so they share the work split and the arithmetic; only
/// addresses differ.
///
/// Consecutive rows whose accessors compare equal read the same cache rows: a prompt chunk of one
/// sequence. Up to kRunRows of them, with contexts that do not shrink and start at kRunMinContext
/// or more, make one item per chunk (attend_span_rows), which reads each tile once for all of them
/// and gives each row bitwise what it gets alone (where runs_pay). Items go to the threads longest
/// first, so that a prompt chunk's last rows, which attend furthest, do not start last.
template <class T, class RowsOf, class CtxOf>
void attend_batch(const AttendShape& sh, int n, const RowsOf& rows_of, const CtxOf& n_ctx_of,
                  const float* q, float* out) {
  const int q_dim = sh.q_dim(), n_heads = sh.n_heads(), group = sh.group, hd = sh.head_dim;
  // Chunks per row; rows of one chunk write `out` directly, the others a partial (acc, max, sum)
  // per chunk, merged below.
  std::vector<int> chunks_of(n);
  std::vector<long> first_partial(static_cast<std::size_t>(n) + 1, 0);
  long work = 0;  // multiply-adds of QK^T and PV, to decide whether threads pay off
  for (int i = 0; i < n; ++i) {
    const int n_ctx = n_ctx_of(i);
    chunks_of[i] = std::max(1, (n_ctx + kAttendChunk - 1) / kAttendChunk);
    first_partial[i + 1] = first_partial[i] + (chunks_of[i] > 1 ? chunks_of[i] : 0);
    work += 2L * n_ctx * q_dim;
  }
  // Runs of rows that read the same cache rows, then items: rows [first, last) of a run, all
  // those that reach chunk `chunk` (a run's contexts do not shrink, so they end the run).
  struct Item {
    int first, last, chunk;
    long positions;  // what the item attends to, summed over its rows: its share of the work
  };
  std::vector<Item> items;
  int widest = 1;  // rows of the longest run
  const bool runs = runs_pay(sh);
  for (int begin = 0, end = 0; begin < n; begin = end) {
    end = begin + 1;
    if constexpr (std::equality_comparable<decltype(rows_of(0))>) {
      while (runs && n_ctx_of(begin) >= kRunMinContext && end < n && end - begin < kRunRows &&
             n_ctx_of(end) >= n_ctx_of(end - 1) && rows_of(end) == rows_of(begin))
        ++end;
    }
    widest = std::max(widest, end - begin);
    for (int c = 0, first = begin; first < end; ++c) {
      while (first < end && chunks_of[first] <= c) ++first;  // rows of fewer chunks have ended
      if (first == end) break;
      long positions = 0;
      for (int i = first; i < end; ++i)
        positions += std::min(n_ctx_of(i), (c + 1) * kAttendChunk) - c * kAttendChunk;
      items.push_back(Item{first, end, c, positions});
    }
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.positions > b.positions; });
  const long n_items = static_cast<long>(items.size());
  const long partial_floats = static_cast<long>(q_dim) + 2L * n_heads;
  std::vector<float> partials(static_cast<std::size_t>(first_partial[n] * partial_floats));
  const bool parallel = work >= (1L << 16);
  // Head ranges per item: the fewest that leave the threads' shares within kRangeSlack of even,
  // so that each item reads as wide a part of each row as it can.
  const long threads = parallel ? omp_get_max_threads() : 1;
  const int ranges = head_ranges(n_items, threads, sh.n_kv_heads, kRangeSlack);
  const int per_range = sh.n_kv_heads / ranges;
  const int range_heads = per_range * group;  // query heads of one range, per row
#pragma omp parallel if (parallel)
  {
    std::vector<float> scratch(attend_scratch_floats(range_heads, hd));
    // A run's queries, outputs and softmax states by KV head (attend_span_rows), and its spans:
    // left uninitialised, since every item writes what it reads, and sized by the widest run,
    // since zeroing them for kRunRows rows of a large model cost more than a short run's work.
    const std::size_t wide = widest > 1 ? static_cast<std::size_t>(widest) * range_heads : 0;
    const auto floats = [](std::size_t count) {
      return std::make_unique_for_overwrite<float[]>(count);
    };
    const auto wide_q = floats(wide * hd), wide_acc = floats(wide * hd);
    const auto wide_max = floats(wide), wide_sum = floats(wide);
    const auto run_scratch =
        floats(widest > 1 ? attend_span_rows_scratch_floats(widest, range_heads, hd) : 0);
    std::vector<int> t_end(widest);
#pragma omp for schedule(dynamic)
    for (long it = 0; it < n_items * ranges; ++it) {
      const Item& item = items[it / ranges];
      const int g0 = static_cast<int>(it % ranges) * per_range, g1 = g0 + per_range;
      const int t_begin = item.chunk * kAttendChunk;
      const long h_begin = static_cast<long>(g0) * group;
      // Where row i's results go: `out`, finished, or its partial for this chunk.
      const auto partial_of = [&](int i) {
        return partials.data() + (first_partial[i] + item.chunk) * partial_floats;
      };
      if (item.last - item.first == 1) {
        const int i = item.first, n_ctx = n_ctx_of(i);
        const long qo = static_cast<long>(i) * q_dim;
        if (chunks_of[i] == 1) {
          attend_kv_heads<T>(q + qo, rows_of(i), n_ctx, sh, g0, g1, out + qo, scratch.data());
        } else {
          float* part = partial_of(i);
          attend_span<T>(q + qo, rows_of(i), t_begin, std::min(n_ctx, t_begin + kAttendChunk), sh,
                         g0, g1, part, part + q_dim + h_begin, part + q_dim + n_heads + h_begin,
                         scratch.data());
        }
        continue;
      }
      const int r = item.last - item.first;
      // Head j of KV head g, row m, at (g - g0) * r * group + m * group + j of the wide arrays.
      const auto wide_at = [&](int g, int m) {
        return (static_cast<long>(g - g0) * r + m) * group;
      };
      for (int m = 0; m < r; ++m) {
        const int i = item.first + m;
        t_end[m] = std::min(n_ctx_of(i), t_begin + kAttendChunk);
        for (int g = g0; g < g1; ++g)
          std::copy_n(q + static_cast<long>(i) * q_dim + static_cast<long>(g) * group * hd,
                      static_cast<long>(group) * hd, &wide_q[wide_at(g, m) * hd]);
      }
      attend_span_rows<T>(wide_q.get(), r, rows_of(item.first), t_begin, t_end.data(), sh, g0, g1,
                          wide_acc.get(), wide_max.get(), wide_sum.get(), run_scratch.get());
      for (int m = 0; m < r; ++m) {
        const int i = item.first + m;
        for (int g = g0; g < g1; ++g)
          for (int j = 0; j < group; ++j) {
            const long w = wide_at(g, m) + j, h = static_cast<long>(g) * group + j;
            const float* acc = &wide_acc[w * hd];
            if (chunks_of[i] == 1) {
              float* o = out + static_cast<long>(i) * q_dim + h * hd;
              std::copy_n(acc, hd, o);
              finish_head(o, wide_sum[w], hd);
            } else {
              float* part = partial_of(i);
              std::copy_n(acc, hd, part + h * hd);
              part[q_dim + h] = wide_max[w];
              part[q_dim + n_heads + h] = wide_sum[w];
            }
          }
      }
    }
    // Rows of several chunks: fold the chunks in order, per query head.
#pragma omp for schedule(static)
    for (long rh = 0; rh < static_cast<long>(n) * n_heads; ++rh) {
      const int i = static_cast<int>(rh / n_heads), h = static_cast<int>(rh % n_heads);
      const long chunks = first_partial[i + 1] - first_partial[i];
      if (chunks == 0) continue;
      float* o = out + static_cast<long>(i) * q_dim + static_cast<long>(h) * hd;
      SoftmaxState state;
      std::fill(o, o + hd, 0.0f);
      for (long ch = 0; ch < chunks; ++ch) {
        const float* part = partials.data() + (first_partial[i] + ch) * partial_floats;
        merge_partial(state, o, SoftmaxState{part[q_dim + h], part[q_dim + n_heads + h]},
                      part + static_cast<long>(h) * hd, hd);
      }
      finish_head(o, state.sum, hd);
    }
  }
}

}  // namespace kvheap::cpu
