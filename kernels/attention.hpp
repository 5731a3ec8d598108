// Causal grouped-query attention of query rows over cached K/V rows (CPU twin).
//
// The cache layout is hidden behind a row accessor so that every policy (contiguous reservation,
// paged blocks, shared prefixes) runs the same arithmetic in the same order; only where a
// position's K and V rows live differs. That is what makes paged results bitwise equal to
// contiguous ones on the same device.
//
// The algorithm is the CUDA kernel's (kernels/decode_attention.cu): one pass over the positions
// with an online softmax. Decode attention reads each cached element once and does only a
// multiply-add or two on it per query head, so on a CPU the loops must run close to the
// multiply-add peak just to keep up with memory: positions go in tiles of eight, query heads in
// fours, and the inner loops (kernels/attention_simd.hpp) keep eight accumulators in registers.
// Work items are whole batch rows where possible, so that one item reads all of each position's
// row (as whole pages, and with the page-table lookup done once per position).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/model_config.hpp"
#include "kernels/attention_simd.hpp"
#include "kernels/kv_types.hpp"

namespace kvheap::cpu {

/// \brief Positions attend_kv_heads handles together.
inline constexpr int kAttendTile = simd::kLanes;

/// \brief Floats of scratch attend_kv_heads needs for `n_heads_q` query heads: a running max,
/// a running sum and one tile of weights per head. It does not grow with the context.
inline std::size_t attend_scratch_floats(int n_heads_q) {
  return static_cast<std::size_t>(n_heads_q) * (2 + kAttendTile);
}

namespace detail {

/// Scores of query heads q_0 .. q_{kHeads-1} against one tile of K rows, into s[j * kTile + p],
/// in blocks of kHeads heads by kLanes / kHeads positions.
template <int kHeads, class T>
void heads_scores(const float* q, const T* const* k, int head_dim, float* s) {
  constexpr int kTile = kAttendTile, kPos = simd::kLanes / kHeads;
  for (int p0 = 0; p0 < kTile; p0 += kPos) {
    float block[simd::kLanes];  // [head][position]
    simd::dot_block<kHeads, kPos>(q, k + p0, head_dim, block);
    for (int j = 0; j < kHeads; ++j)
      for (int p = 0; p < kPos; ++p) s[j * kTile + p0 + p] = block[j * kPos + p];
  }
}

/// Scores of one KV head's query group against one tile of K rows: s[j * kTile + p] for query
/// head j of the group. Heads go four at a time where they can, so each loaded K vector serves
/// four multiply-adds (for bf16 and fp16, one widening serves four heads).
template <class T>
void group_scores(const float* q, const T* const* k, int group, int head_dim, float* s) {
  constexpr int kTile = kAttendTile;
  int j = 0;
  for (; j + 4 <= group; j += 4)
    heads_scores<4>(q + static_cast<long>(j) * head_dim, k, head_dim, s + j * kTile);
  for (; j + 2 <= group; j += 2)
    heads_scores<2>(q + static_cast<long>(j) * head_dim, k, head_dim, s + j * kTile);
  for (; j < group; ++j)
    heads_scores<1>(q + static_cast<long>(j) * head_dim, k, head_dim, s + j * kTile);
}

/// o_j += sum over the first nt rows of w_j[p] * v[p] for kHeads heads; see group_accumulate.
template <int kHeads, class T>
void heads_accumulate(const float* w, const T* const* v, int nt, int head_dim, float* o) {
  if (nt == kAttendTile) {
    simd::accumulate_block<kHeads, kAttendTile>(w, kAttendTile, v, nt, head_dim, o);
  } else {
    simd::accumulate_block<kHeads, 0>(w, kAttendTile, v, nt, head_dim, o);
  }
}

/// o_j += sum over the first nt rows of w_j[p] * v[p] for one KV head's query group, heads four
/// at a time where they can (each loaded V vector serves four heads).
template <class T>
void group_accumulate(const float* w, const T* const* v, int nt, int group, int head_dim,
                      float* o) {
  constexpr int kTile = kAttendTile;
  int j = 0;
  for (; j + 4 <= group; j += 4)
    heads_accumulate<4>(w + j * kTile, v, nt, head_dim, o + static_cast<long>(j) * head_dim);
  for (; j + 2 <= group; j += 2)
    heads_accumulate<2>(w + j * kTile, v, nt, head_dim, o + static_cast<long>(j) * head_dim);
  for (; j < group; ++j)
    heads_accumulate<1>(w + j * kTile, v, nt, head_dim, o + static_cast<long>(j) * head_dim);
}

}  // namespace detail

/// \brief Attention of one query row over positions [0, n_ctx), for KV heads [kv_begin, kv_end)
/// and their query groups.
///
/// \param q        [n_heads, head_dim] the row's queries; heads kv_begin * group onwards are read
/// \param rows     accessor: rows.k(t) and rows.v(t) point at position t's [n_kv_heads, head_dim]
/// \param out      [n_heads, head_dim] the row's output; the same heads are written
/// \param scratch  attend_scratch_floats((kv_end - kv_begin) * group) floats
///
/// One pass over the positions, a tile at a time, with an online softmax (a running max and sum
/// per query head; earlier weights are rescaled when the max grows), so nothing the size of the
/// context is stored: each tile's K and V rows are read once, for the whole query group
/// (grouped-query aware), while they are in cache. A range of KV heads reads a contiguous part of
/// each position's row. All arithmetic is fp32, and every reduction has an order fixed by
/// head_dim and the position alone: any layout, any head range and any thread count give bitwise
/// the same result for a head.
template <class T, class Rows>
void attend_kv_heads(const float* q, const Rows& rows, int n_ctx, int kv_begin, int kv_end,
                     int group, int head_dim, float* out, float* scratch) {
  constexpr int kTile = kAttendTile;
  const int n_q = (kv_end - kv_begin) * group;
  const long q_begin = static_cast<long>(kv_begin) * group * head_dim;  // first output element
  float* o = out + q_begin;                                             // [n_q, head_dim]
  std::fill(o, o + static_cast<long>(n_q) * head_dim, 0.0f);
  if (n_ctx <= 0) return;  // nothing to attend to: a zero output
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  float* run_max = scratch;        // [n_q] largest score so far
  float* run_sum = run_max + n_q;  // [n_q] sum of exp(score - run_max) so far
  float* w = run_sum + n_q;        // [n_q, kTile] this tile's exp(score - run_max)
  std::fill(run_max, run_max + n_q, -std::numeric_limits<float>::infinity());
  std::fill(run_sum, run_sum + n_q, 0.0f);
  const T*
      k_rows[kTile];  // the tile's rows as stored: one accessor call per position, not per head
  const T* v_rows[kTile];
  const T* row[kTile];  // one KV head's part of them

  for (int t0 = 0; t0 < n_ctx; t0 += kTile) {
    const int nt = std::min(kTile, n_ctx - t0);  // a short last tile repeats its last row
    for (int p = 0; p < kTile; ++p) {
      k_rows[p] = rows.k(t0 + std::min(p, nt - 1));
      v_rows[p] = rows.v(t0 + std::min(p, nt - 1));
    }
    for (int g = kv_begin; g < kv_end; ++g) {
      const long head_off = static_cast<long>(g) * head_dim;
      const int h0 = (g - kv_begin) * group;  // the group's first head in this range
      // Scores S[h][t] = q_h . k_t / sqrt(head_dim), then the softmax step for each head.
      for (int p = 0; p < kTile; ++p) row[p] = k_rows[p] + head_off;
      float* wg = w + h0 * kTile;
      detail::group_scores(q + q_begin + static_cast<long>(h0) * head_dim, row, group, head_dim,
                           wg);
      for (int j = 0; j < group; ++j) {
        float* oh = o + static_cast<long>(h0 + j) * head_dim;
        for (int p = 0; p < kTile; ++p) wg[j * kTile + p] *= scale;
        const float factor =
            simd::online_softmax_step(wg + j * kTile, nt, run_max[h0 + j], run_sum[h0 + j]);
        if (factor != 1.0f)
          for (int d = 0; d < head_dim; ++d) oh[d] *= factor;
      }
      // O[h] += P[h][t] * v_t, positions in increasing order.
      for (int p = 0; p < nt; ++p) row[p] = v_rows[p] + head_off;
      detail::group_accumulate(wg, row, nt, group, head_dim, o + static_cast<long>(h0) * head_dim);
    }
  }
  for (int h = 0; h < n_q; ++h) {
    const float inv = 1.0f / run_sum[h];
    for (int d = 0; d < head_dim; ++d) o[static_cast<long>(h) * head_dim + d] *= inv;
  }
}

/// \brief attend_kv_heads for every row of a batch, in parallel when the work pays for threads.
///
/// \param rows_of   rows_of(i) is batch row i's accessor (must not throw)
/// \param n_ctx_of  n_ctx_of(i) is how many positions batch row i attends to
/// \param q         [n, n_heads, head_dim]
/// \param out       [n, n_heads, head_dim] written
///
/// A work item is a batch row and a range of its KV heads: whole rows when there are enough of
/// them to keep the threads busy (one item then reads all of each position's row), else each row
/// split into just enough head ranges. Every CPU cache policy calls this with its own accessor,
/// so they share the work split and the arithmetic; only addresses differ.
template <class T, class RowsOf, class CtxOf>
void attend_batch(const ModelConfig& c, int n, const RowsOf& rows_of, const CtxOf& n_ctx_of,
                  const float* q, float* out) {
  const int group = c.group_size();
  const int hd = c.head_dim;
  long work = 0;  // multiply-adds of QK^T and PV, to decide whether threads pay off
  for (int i = 0; i < n; ++i) work += 2L * n_ctx_of(i) * c.q_dim();
  const bool parallel = work >= (1L << 16);
  // Head ranges per row: the fewest (a divisor of n_kv_heads) that give every thread the same
  // number of items, so that each item reads as wide a part of each row as it can.
  const long threads = parallel ? omp_get_max_threads() : 1;
  int ranges = 1;
  while (ranges < c.n_kv_heads &&
         (c.n_kv_heads % ranges != 0 || n * ranges < threads || n * ranges % threads != 0))
    ++ranges;
  const int per_range = c.n_kv_heads / ranges;
#pragma omp parallel if (parallel)
  {
    std::vector<float> scratch;
#pragma omp for schedule(dynamic)
    for (long item = 0; item < static_cast<long>(n) * ranges; ++item) {
      const int i = static_cast<int>(item / ranges);
      const int g0 = static_cast<int>(item % ranges) * per_range;
      const int n_ctx = n_ctx_of(i);
      scratch.resize(attend_scratch_floats(per_range * group));
      const long qo = static_cast<long>(i) * c.q_dim();
      attend_kv_heads<T>(q + qo, rows_of(i), n_ctx, g0, g0 + per_range, group, hd, out + qo,
                         scratch.data());
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
