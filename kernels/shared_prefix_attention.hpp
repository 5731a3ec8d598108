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

#include "common/model_config.hpp"
#include "kernels/attention.hpp"
#include "kernels/attention_batch.hpp"
#include "kernels/attention_merge.hpp"

namespace kvheap {

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
  /// group's prefix once, plus every row's positions outside its group's prefix.
  [[nodiscard]] long positions_read(const std::vector<int>& n_ctx) const {
    long total = 0;
    for (int c : n_ctx) total += c;
    for (int g = 0; g < groups(); ++g)
      total -= static_cast<long>(indptr[g + 1] - indptr[g] - 1) * prefix_len[g];
    return total;
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
/// attend_batch's result. The work items are (group, KV head) for the prefixes and (row, KV head)
/// for the suffixes, all of them independent; the merge of the two partial states follows.
template <class T, class RowsOf, class CtxOf>
void attend_batch_shared_prefix(const ModelConfig& c, int n, const RowsOf& rows_of,
                                const CtxOf& n_ctx_of, const SharedPrefixPlan& plan, const float* q,
                                float* out) {
  const int q_dim = c.q_dim(), n_heads = c.n_heads, hd = c.head_dim, kvh = c.n_kv_heads;
  const int group = c.group_size();

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
        c, static_cast<int>(m), [&](int j) { return rows_of(alone[j]); },
        [&](int j) { return n_ctx_of(alone[j]); }, q_alone.data(), out_alone.data());
    for (long j = 0; j < m; ++j)
      std::copy_n(&out_alone[j * q_dim], q_dim, out + alone[j] * static_cast<long>(q_dim));
  }
  if (plan.groups() == 0) return;

  // The prefix pass sees a group of r rows as one row with r x group query heads per KV head:
  // wide head h * (r * group) + m * group + j is head h * group + j of the group's m-th row.
  const int G = plan.groups();
  std::vector<long> wide_at(G + 1, 0);  // offset of each group's wide arrays, in heads
  for (int g = 0; g < G; ++g)
    wide_at[g + 1] = wide_at[g] + static_cast<long>(plan.indptr[g + 1] - plan.indptr[g]) * n_heads;
  std::vector<float> wide_q(wide_at[G] * hd), wide_acc(wide_at[G] * hd);
  std::vector<float> wide_max(wide_at[G]), wide_sum(wide_at[G]);
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
  // Suffix states per grouped row: [rows in groups, n_heads]; the accumulators go to `out`.
  const int R = static_cast<int>(plan.rows.size());
  std::vector<float> suf_max(static_cast<long>(R) * n_heads), suf_sum(suf_max.size());
  std::vector<int> group_of(R);
  for (int g = 0; g < G; ++g)
    for (int k = plan.indptr[g]; k < plan.indptr[g + 1]; ++k) group_of[k] = g;
  int widest = 0;
  for (int g = 0; g < G; ++g) widest = std::max(widest, plan.indptr[g + 1] - plan.indptr[g]);

  const long prefix_items = static_cast<long>(G) * kvh, items = prefix_items + long{R} * kvh;
  long work = 0;
  for (int k = 0; k < R; ++k) work += 2L * n_ctx_of(plan.rows[k]) * q_dim;
#pragma omp parallel if (work >= (1L << 16))
  {
    std::vector<float> scratch(attend_span_scratch_floats(std::max(widest, 1) * group, hd));
    std::vector<float> suffix(hd);
#pragma omp for schedule(dynamic)
    for (long item = 0; item < items; ++item) {
      if (item < prefix_items) {  // group g's prefix, KV head h, for all its rows at once
        const int g = static_cast<int>(item / kvh), h = static_cast<int>(item % kvh);
        const int r = plan.indptr[g + 1] - plan.indptr[g];
        const AttendShape wide{kvh, r * group, hd};
        const long at = wide_at[g];
        attend_span<T>(&wide_q[at * hd], rows_of(plan.rows[plan.indptr[g]]), 0, plan.prefix_len[g],
                       wide, h, h + 1, &wide_acc[at * hd],
                       &wide_max[at + static_cast<long>(h) * r * group],
                       &wide_sum[at + static_cast<long>(h) * r * group], scratch.data());
      } else {  // grouped row k's own positions past the prefix, KV head h
        const long s = item - prefix_items;
        const int k = static_cast<int>(s / kvh), h = static_cast<int>(s % kvh);
        const int i = plan.rows[k];
        const AttendShape sh{kvh, group, hd};
        attend_span<T>(q + static_cast<long>(i) * q_dim, rows_of(i), plan.prefix_len[group_of[k]],
                       n_ctx_of(i), sh, h, h + 1, out + static_cast<long>(i) * q_dim,
                       &suf_max[static_cast<long>(k) * n_heads + h * group],
                       &suf_sum[static_cast<long>(k) * n_heads + h * group], scratch.data());
      }
    }
    // Merge: prefix state first, then the row's suffix, per (grouped row, query head).
#pragma omp for schedule(static)
    for (long kh = 0; kh < static_cast<long>(R) * n_heads; ++kh) {
      const int k = static_cast<int>(kh / n_heads), qh = static_cast<int>(kh % n_heads);
      const int g = group_of[k], m = k - plan.indptr[g], r = plan.indptr[g + 1] - plan.indptr[g];
      const int h = qh / group, j = qh % group;
      const long wide = wide_at[g] + static_cast<long>(h) * r * group + m * group + j;
      float* o = out + static_cast<long>(plan.rows[k]) * q_dim + static_cast<long>(qh) * hd;
      std::copy_n(o, hd, suffix.data());
      SoftmaxState state{wide_max[wide], wide_sum[wide]};
      std::copy_n(&wide_acc[wide * hd], hd, o);
      merge_partial(state, o, SoftmaxState{suf_max[kh], suf_sum[kh]}, suffix.data(), hd);
      finish_head(o, state.sum, hd);
    }
  }
}

}  // namespace cpu
}  // namespace kvheap
