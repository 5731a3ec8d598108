// The CPU twin over a whole batch: the work split across threads and the merge of long contexts'
// chunks (flash-decoding's split-K on the CPU), shared by every CPU cache policy.
#pragma once

#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/attention_merge.hpp"

namespace kvheap::cpu {

/// \brief Positions per work item of attend_batch: longer contexts are split into chunks of this
/// many positions and merged by log-sum-exp, whatever the thread count.
inline constexpr int kAttendChunk = 2048;

/// \brief attend_kv_heads for every row of a batch, in parallel when the work pays for threads.
///
/// \param rows_of   rows_of(i) is batch row i's accessor (must not throw)
/// \param n_ctx_of  n_ctx_of(i) is how many positions batch row i attends to
/// \param q         [n, n_heads, head_dim]
/// \param out       [n, n_heads, head_dim] written
///
/// A work item is a chunk of a row's context (kAttendChunk positions; the whole row when it is
/// shorter) and a range of its KV heads: whole rows when there are enough chunks to keep the
/// threads busy (one item then reads all of each position's row, page by page), else each chunk
/// split into just enough head ranges. A row of several chunks is merged by log-sum-exp in chunk
/// order afterwards. The chunks are fixed by the context length, not by the thread count, so the
/// numbers are the same with any number of threads. Every CPU cache policy calls this with its
/// own accessor, so they share the work split and the arithmetic; only addresses differ.
template <class T, class RowsOf, class CtxOf>
void attend_batch(const AttendShape& sh, int n, const RowsOf& rows_of, const CtxOf& n_ctx_of,
                  const float* q, float* out) {
  const int q_dim = sh.q_dim(), n_heads = sh.n_heads();
  // Chunks: first_chunk[i] is row i's first; rows of one chunk write `out` directly, the others
  // a partial (acc, max, sum) each, merged below.
  std::vector<long> first_chunk(static_cast<std::size_t>(n) + 1, 0);
  std::vector<long> first_partial(static_cast<std::size_t>(n) + 1, 0);
  long work = 0;  // multiply-adds of QK^T and PV, to decide whether threads pay off
  for (int i = 0; i < n; ++i) {
    const int n_ctx = n_ctx_of(i);
    const long chunks = std::max(1, (n_ctx + kAttendChunk - 1) / kAttendChunk);
    first_chunk[i + 1] = first_chunk[i] + chunks;
    first_partial[i + 1] = first_partial[i] + (chunks > 1 ? chunks : 0);
    work += 2L * n_ctx * q_dim;
  }
  const long n_chunks = first_chunk[n];
  const long partial_floats = static_cast<long>(q_dim) + 2L * n_heads;
  std::vector<float> partials(static_cast<std::size_t>(first_partial[n] * partial_floats));
  const bool parallel = work >= (1L << 16);
  // Head ranges per chunk: the fewest (a divisor of n_kv_heads) that give every thread the same
  // number of items, so that each item reads as wide a part of each row as it can.
  const long threads = parallel ? omp_get_max_threads() : 1;
  int ranges = 1;
  while (ranges < sh.n_kv_heads && (sh.n_kv_heads % ranges != 0 || n_chunks * ranges < threads ||
                                    n_chunks * ranges % threads != 0))
    ++ranges;
  const int per_range = sh.n_kv_heads / ranges;
#pragma omp parallel if (parallel)
  {
    std::vector<float> scratch(attend_scratch_floats(per_range * sh.group, sh.head_dim));
#pragma omp for schedule(dynamic)
    for (long item = 0; item < n_chunks * ranges; ++item) {
      const long chunk = item / ranges;
      const int g0 = static_cast<int>(item % ranges) * per_range;
      const int i =
          static_cast<int>(std::upper_bound(first_chunk.begin(), first_chunk.end(), chunk) -
                           first_chunk.begin() - 1);
      const long qo = static_cast<long>(i) * q_dim;
      const int n_ctx = n_ctx_of(i);
      if (first_chunk[i + 1] - first_chunk[i] == 1) {
        attend_kv_heads<T>(q + qo, rows_of(i), n_ctx, sh, g0, g0 + per_range, out + qo,
                           scratch.data());
        continue;
      }
      const long local = chunk - first_chunk[i];  // this chunk's index within its row
      float* part = partials.data() + (first_partial[i] + local) * partial_floats;
      const int t_begin = static_cast<int>(local) * kAttendChunk;
      const long h_begin = static_cast<long>(g0) * sh.group;
      attend_span<T>(q + qo, rows_of(i), t_begin, std::min(n_ctx, t_begin + kAttendChunk), sh, g0,
                     g0 + per_range, part, part + q_dim + h_begin, part + q_dim + n_heads + h_begin,
                     scratch.data());
    }
    // Rows of several chunks: fold the chunks in order, per query head.
#pragma omp for schedule(static)
    for (long rh = 0; rh < static_cast<long>(n) * n_heads; ++rh) {
      const int i = static_cast<int>(rh / n_heads), h = static_cast<int>(rh % n_heads);
      const long chunks = first_partial[i + 1] - first_partial[i];
      if (chunks == 0) continue;
      float* o = out + static_cast<long>(i) * q_dim + static_cast<long>(h) * sh.head_dim;
      SoftmaxState state;
      std::fill(o, o + sh.head_dim, 0.0f);
      for (long ch = 0; ch < chunks; ++ch) {
        const float* part = partials.data() + (first_partial[i] + ch) * partial_floats;
        merge_partial(state, o, SoftmaxState{part[q_dim + h], part[q_dim + n_heads + h]},
                      part + static_cast<long>(h) * sh.head_dim, sh.head_dim);
      }
      finish_head(o, state.sum, sh.head_dim);
    }
  }
}

}  // namespace kvheap::cpu
