// Attention that reads a shared prefix once for all the rows that share it (CPU twin).
//
// Forked samples and prompts that begin alike hold the same physical blocks for their first
// positions. Plain paged attention reads those blocks once per row; the decode step's KV traffic
// then grows with the number of sharers although the bytes are the same. Here it does not:
//
//   rows 0..r-1 share positions [0, L):   prefix pass: one pass over [0, L) for all r rows
//                                         suffix pass: each row over its own [L, n_ctx)
//                                         merge:       log-sum-exp of the two partial states
//
// The prefix pass is grouped-query attention with a larger group. A KV head's rows are already
// read once for its `group` query heads; for a shared prefix its query heads are those of all r
// rows, r x group of them, so the same inner loops (attend_span) read each prefix block once and
// apply it to every row. Nothing is copied: the rows keep their page tables, and the prefix pass
// reads through the first row's.
//
// The split at L changes the order of the softmax sums, so the result equals plain attention
// within rounding (about 1e-6 relative), not bitwise: the second tier of kvheap's equality.
#pragma once

#include <omp.h>

#include <algorithm>
#include <vector>

#include "base/dtype.hpp"
#include "kernels/attention.hpp"
#include "kernels/attention_batch.hpp"
#include "kernels/attention_merge.hpp"
#include "kernels/cuda_stream.hpp"

namespace kvheap {

/// \brief Query heads one block of the GPU decode-attention kernel holds (decode_attention.cuh):
/// a wider group is cut into slices that each read the cache rows again.
inline constexpr int kGpuHeadsPerBlock = 16;

/// \brief Which batch rows share a prefix, and how long it is (host arrays; CSR over groups).
///
/// Group g is rows[indptr[g] .. indptr[g+1]), all of which read the same physical blocks for
/// positions [0, prefix_len[g]); prefix_len is a whole number of blocks and no row of the group
/// attends to fewer positions. Rows in no group read their whole context alone.
struct SharedPrefixPlan {
  std::vector<int> indptr = {0};  ///< [groups + 1]
  std::vector<int> rows;          ///< [rows in groups] batch row ids, by group
  std::vector<int> prefix_len;    ///< [groups] positions the group shares

  /// \brief Number of groups.
  [[nodiscard]] int groups() const { return static_cast<int>(prefix_len.size()); }
  /// \brief Positions attention reads for a batch whose row i attends n_ctx[i] positions: each
  /// group's prefix once, plus every row's positions outside its group's prefix. With
  /// `heads_per_pass` > 0 (the GPU kernel's limit, kGpuHeadsPerBlock), a group of r rows of
  /// `group` query heads per KV head reads its prefix ceil(r x group / heads_per_pass) times.
  [[nodiscard]] long positions_read(const std::vector<int>& n_ctx, int group = 1,
                                    int heads_per_pass = 0) const {
    long total = 0;
    for (int c : n_ctx) total += c;
    for (int g = 0; g < groups(); ++g) {
      const long r = indptr[g + 1] - indptr[g];
      const long reads = heads_per_pass > 0 ? (r * group + heads_per_pass - 1) / heads_per_pass : 1;
      total -= (r - reads) * prefix_len[g];
    }
    return total;
  }
};

/// \brief The device-side view of a SharedPrefixPlan for a batch of n rows (pointers are device
/// memory; the counts are host values).
struct SharedPrefixView {
  int groups = 0;                   ///< G
  int widest = 0;                   ///< rows in the largest group
  int max_prefix = 0;               ///< longest prefix_len (sizes the prefix pass's split-K)
  int max_own = 0;                  ///< longest own_ctx (sizes the rows' pass's split-K)
  const int* prefix_len = nullptr;  ///< [G] positions of each group's prefix
  const int* prefix_seq = nullptr;  ///< [G] the sequence whose page table the prefix pass reads
  const int* group_rows = nullptr;  ///< [G, widest] each group's batch rows, -1 past its size
  const int* group_size = nullptr;  ///< [G] rows in each group
  const int* first = nullptr;       ///< [n] first position of each row's own pass
  const int* own_ctx = nullptr;     ///< [n] positions of each row's own pass: n_ctx - first
  const int* row_group = nullptr;   ///< [n] each row's group, -1 for none
  const int* row_member = nullptr;  ///< [n] each row's index within its group
};

/// \brief Host arrays behind a SharedPrefixView, built from a plan and the batch's row-to-sequence
/// map and context lengths.
struct SharedPrefixArrays {
  int widest = 0;               ///< rows in the largest group
  std::vector<int> prefix_len;  ///< [G]
  std::vector<int> prefix_seq;  ///< [G]
  std::vector<int> group_rows;  ///< [G * widest]
  std::vector<int> group_size;  ///< [G]
  std::vector<int> first;       ///< [n]
  std::vector<int> own_ctx;     ///< [n]
  std::vector<int> row_group;   ///< [n]
  std::vector<int> row_member;  ///< [n]

  /// \brief Builds the arrays; row_seq[i] and n_ctx[i] describe batch row i.
  SharedPrefixArrays(const SharedPrefixPlan& plan, const std::vector<int>& row_seq,
                     const std::vector<int>& n_ctx) {
    const int n = static_cast<int>(n_ctx.size()), G = plan.groups();
    for (int g = 0; g < G; ++g) widest = std::max(widest, plan.indptr[g + 1] - plan.indptr[g]);
    prefix_len = plan.prefix_len;
    group_rows.assign(static_cast<std::size_t>(G) * widest, -1);
    first.assign(n, 0);
    row_group.assign(n, -1);
    row_member.assign(n, 0);
    for (int g = 0; g < G; ++g) {
      prefix_seq.push_back(row_seq[plan.rows[plan.indptr[g]]]);
      group_size.push_back(plan.indptr[g + 1] - plan.indptr[g]);
      for (int k = plan.indptr[g]; k < plan.indptr[g + 1]; ++k) {
        const int i = plan.rows[k], m = k - plan.indptr[g];
        group_rows[static_cast<std::size_t>(g) * widest + m] = i;
        first[i] = plan.prefix_len[g];
        row_group[i] = g;
        row_member[i] = m;
      }
    }
    own_ctx.resize(n);
    for (int i = 0; i < n; ++i) own_ctx[i] = n_ctx[i] - first[i];
  }
};

namespace cpu {

/// \brief Causal attention of a batch's rows like attend_batch, with each group of `plan` reading
/// its shared prefix once for all its rows.
///
/// \param rows_of   rows_of(i) is batch row i's accessor (must not throw)
/// \param n_ctx_of  n_ctx_of(i) is how many positions batch row i attends to
/// \param q         [n, n_heads, head_dim]
/// \param out       [n, n_heads, head_dim] written
///
/// Rows in no group go through attend_batch unchanged, so a plan without groups gives bitwise
/// attend_batch's result. The work items, all independent, are chunks of kAttendChunk positions
/// of each prefix (for all the group's rows) and each grouped row's own positions, split into
/// head ranges only when there are too few to keep the threads busy; the merge of the partial
/// states follows.
template <class T, class RowsOf, class CtxOf>
void attend_batch_shared_prefix(const AttendShape& sh, int n, const RowsOf& rows_of,
                                const CtxOf& n_ctx_of, const SharedPrefixPlan& plan, const float* q,
                                float* out) {
  const int q_dim = sh.q_dim(), n_heads = sh.n_heads(), hd = sh.head_dim, kvh = sh.n_kv_heads;
  const int group = sh.group;

  // Rows that share nothing: attend_batch over them, gathered and scattered.
  std::vector<char> grouped(n, 0);
  for (int r : plan.rows) grouped[r] = 1;
  std::vector<int> alone;
  for (int i = 0; i < n; ++i)
    if (!grouped[i]) alone.push_back(i);
  if (!alone.empty()) {
    const long m = static_cast<long>(alone.size());
    std::vector<float> q_alone(m * q_dim), out_alone(m * q_dim);
    for (long j = 0; j < m; ++j)
      std::copy_n(q + alone[j] * static_cast<long>(q_dim), q_dim, &q_alone[j * q_dim]);
    attend_batch<T>(
        sh, static_cast<int>(m), [&](int j) { return rows_of(alone[j]); },
        [&](int j) { return n_ctx_of(alone[j]); }, q_alone.data(), out_alone.data());
    for (long j = 0; j < m; ++j)
      std::copy_n(&out_alone[j * q_dim], q_dim, out + alone[j] * static_cast<long>(q_dim));
  }
  if (plan.groups() == 0) return;

  // The prefix pass sees a group of r rows as one row with r x group query heads per KV head:
  // wide head h * (r * group) + m * group + j is head h * group + j of the group's m-th row.
  const int G = plan.groups();
  std::vector<long> wide_at(G + 1, 0);  // offset of each group's wide queries, in heads
  for (int g = 0; g < G; ++g)
    wide_at[g + 1] = wide_at[g] + static_cast<long>(plan.indptr[g + 1] - plan.indptr[g]) * n_heads;
  std::vector<float> wide_q(wide_at[G] * hd);
  for (int g = 0; g < G; ++g) {
    const int r = plan.indptr[g + 1] - plan.indptr[g];
    for (int m = 0; m < r; ++m)
      for (int h = 0; h < kvh; ++h)
        for (int j = 0; j < group; ++j) {
          const long wide = wide_at[g] + static_cast<long>(h) * r * group + m * group + j;
          const float* src = q + static_cast<long>(plan.rows[plan.indptr[g] + m]) * q_dim +
                             static_cast<long>(h * group + j) * hd;
          std::copy_n(src, hd, &wide_q[wide * hd]);
        }
  }
  // Work items read whole cache rows (every KV head of a position), as attend_batch's do: items
  // of one KV head would read a 1/n_kv_heads slice of each row, a strided pattern the hardware
  // prefetchers follow badly. Prefixes go in chunks of kAttendChunk positions, each leaving a
  // partial state per wide head; the rows' own positions are one item per row.
  std::vector<int> first_chunk(G + 1, 0);
  for (int g = 0; g < G; ++g)
    first_chunk[g + 1] =
        first_chunk[g] + std::max(1, (plan.prefix_len[g] + kAttendChunk - 1) / kAttendChunk);
  const int chunks = first_chunk[G];
  std::vector<long> part_at(chunks + 1, 0);  // offset of each chunk's partial state, in heads
  for (int g = 0; g < G; ++g)
    for (int ch = first_chunk[g]; ch < first_chunk[g + 1]; ++ch)
      part_at[ch + 1] = part_at[ch] + (wide_at[g + 1] - wide_at[g]);
  std::vector<float> part_acc(part_at[chunks] * hd), part_max(part_at[chunks]),
      part_sum(part_at[chunks]);
  std::vector<int> group_of_chunk(chunks);
  for (int g = 0; g < G; ++g)
    for (int ch = first_chunk[g]; ch < first_chunk[g + 1]; ++ch) group_of_chunk[ch] = g;
  // Each grouped row's own positions: states [rows in groups, n_heads]; accumulators in `out`.
  const int R = static_cast<int>(plan.rows.size());
  std::vector<float> own_max(static_cast<long>(R) * n_heads), own_sum(own_max.size());
  std::vector<int> group_of(R);
  for (int g = 0; g < G; ++g)
    for (int k = plan.indptr[g]; k < plan.indptr[g + 1]; ++k) group_of[k] = g;
  int widest = 0;
  for (int g = 0; g < G; ++g) widest = std::max(widest, plan.indptr[g + 1] - plan.indptr[g]);

  long work = 0;
  for (int k = 0; k < R; ++k) work += 2L * n_ctx_of(plan.rows[k]) * q_dim;
  const bool parallel = work >= (1L << 16);
  // Head ranges per item, as in attend_batch: the fewest that give every thread the same number of
  // items, so that each item reads as wide a part of each row as it can.
  const long items = chunks + R;
  const long threads = parallel ? omp_get_max_threads() : 1;
  int ranges = 1;
  while (ranges < kvh &&
         (kvh % ranges != 0 || items * ranges < threads || items * ranges % threads != 0))
    ++ranges;
  const int per_range = kvh / ranges;
#pragma omp parallel if (parallel)
  {
    std::vector<float> scratch(attend_span_scratch_floats(per_range * widest * group, hd));
    std::vector<float> own(hd);
#pragma omp for schedule(dynamic)
    for (long item = 0; item < items * ranges; ++item) {
      const long unit = item / ranges;
      const int h0 = static_cast<int>(item % ranges) * per_range;
      if (unit < chunks) {  // a chunk of a group's prefix, for all the group's rows at once
        const int ch = static_cast<int>(unit), g = group_of_chunk[ch];
        const int r = plan.indptr[g + 1] - plan.indptr[g];
        const int t0 = (ch - first_chunk[g]) * kAttendChunk;
        const long at = part_at[ch] + static_cast<long>(h0) * r * group;
        attend_span<T>(&wide_q[wide_at[g] * hd], rows_of(plan.rows[plan.indptr[g]]), t0,
                       std::min(plan.prefix_len[g], t0 + kAttendChunk),
                       AttendShape{kvh, r * group, hd}, h0, h0 + per_range,
                       &part_acc[part_at[ch] * hd], &part_max[at], &part_sum[at], scratch.data());
      } else {  // a grouped row's own positions past the prefix
        const int k = static_cast<int>(unit - chunks), i = plan.rows[k];
        const long at = static_cast<long>(k) * n_heads + static_cast<long>(h0) * group;
        attend_span<T>(q + static_cast<long>(i) * q_dim, rows_of(i), plan.prefix_len[group_of[k]],
                       n_ctx_of(i), AttendShape{kvh, group, hd}, h0, h0 + per_range,
                       out + static_cast<long>(i) * q_dim, &own_max[at], &own_sum[at],
                       scratch.data());
      }
    }
    // Merge per (grouped row, query head): the prefix's chunks in order, then the row's own.
#pragma omp for schedule(static)
    for (long kh = 0; kh < static_cast<long>(R) * n_heads; ++kh) {
      const int k = static_cast<int>(kh / n_heads), qh = static_cast<int>(kh % n_heads);
      const int g = group_of[k], m = k - plan.indptr[g], r = plan.indptr[g + 1] - plan.indptr[g];
      const long wide = static_cast<long>(qh / group) * r * group + m * group + qh % group;
      float* o = out + static_cast<long>(plan.rows[k]) * q_dim + static_cast<long>(qh) * hd;
      std::copy_n(o, hd, own.data());
      std::fill(o, o + hd, 0.0f);
      SoftmaxState state;
      for (int ch = first_chunk[g]; ch < first_chunk[g + 1]; ++ch) {
        const long p = part_at[ch] + wide;
        merge_partial(state, o, SoftmaxState{part_max[p], part_sum[p]}, &part_acc[p * hd], hd);
      }
      merge_partial(state, o, SoftmaxState{own_max[kh], own_sum[kh]}, own.data(), hd);
      finish_head(o, state.sum, hd);
    }
  }
}

}  // namespace cpu

struct PagedLocator;  // kernels/paged_attention.hpp

namespace cuda {

struct AttentionShape;     // kernels/decode_attention.hpp (device builds only)
class AttentionWorkspace;  // kernels/decode_attention.hpp

/// \brief Floats of the wide queries shared_prefix_attention gathers: groups x widest x n_heads x
/// head_dim.
inline std::size_t shared_prefix_wide_q_floats(int groups, int widest, int n_heads, int head_dim) {
  return static_cast<std::size_t>(groups) * widest * n_heads * head_dim;
}

/// \brief Decode attention over a paged cache in which the groups of `plan` read their shared
/// prefix once (GPU; the CPU twin is cpu::attend_batch_shared_prefix).
///
/// Three launches of chapter 2's kernel machinery and a merge: the prefix pass runs the decode
/// attention kernel over one wide row per group (n_heads x widest query heads, gathered into
/// `wide_q`) through the page table of the group's first sequence; the rows' pass runs it over
/// every row's positions [first, n_ctx) through a locator that offsets positions; both leave
/// unnormalised partial states, which the merge combines per (row, head). A group wider than 16
/// query heads per KV head is cut into slices that each read the prefix (see
/// decode_attention.cuh), so r rows of group size g read it ceil(r g / 16) times, not r times;
/// wide rows are padded to the widest group, and a slice that is all padding reads nothing.
///
/// \param kv      element type of the pool
/// \param q       [n, n_heads, head_dim] fp32 (device)
/// \param k_cache [num_blocks, block_size, n_kv_heads, head_dim] one layer, in `kv` (device)
/// \param v_cache same layout (device)
/// \param pages   the batch's page tables (device pointers)
/// \param plan    which rows share which prefix (device pointers, host counts)
/// \param shape   n, heads and head_dim of the batch (max_n_ctx unused: the passes size
///                themselves from plan)
/// \param out     [n, n_heads, head_dim] fp32, written (device)
/// \param wide_q  shared_prefix_wide_q_floats(...) floats of device scratch
/// \param prefix_ws scratch of the prefix pass's partial states, grown when needed
/// \param own_ws  scratch of the rows' own pass's partial states, grown when needed
/// \param stream  stream to run on
/// \param force_splits > 0: split both passes' contexts into exactly this many chunks (tests)
void shared_prefix_attention(DType kv, const float* q, const void* k_cache, const void* v_cache,
                             const PagedLocator& pages, const SharedPrefixView& plan,
                             const AttentionShape& shape, float* out, float* wide_q,
                             AttentionWorkspace& prefix_ws, AttentionWorkspace& own_ws,
                             StreamHandle stream = nullptr, int force_splits = 0);

}  // namespace cuda
}  // namespace kvheap
