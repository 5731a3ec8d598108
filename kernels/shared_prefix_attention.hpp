// Attention that reads a shared prefix once for all the rows that share it: the plan of which rows
// share what, its device view, and the CUDA entry point (shared_prefix_attention.cu). The CPU twin
// is cpu::attend_batch_shared_prefix in shared_prefix_attention_cpu.hpp.
//
// Forked samples and prompts that begin alike hold the same physical blocks for their first
// positions. Plain paged attention reads those blocks once per row; the decode step's KV traffic
// then grows with the number of sharers although the bytes are the same. Here it does not:
//
//   rows 0..r-1 share positions [0, L):   prefix pass: one pass over [0, L) for all r rows
//                                         suffix pass: each row over its own [L, n_ctx)
//                                         merge:       log-sum-exp of the two partial states
//
// The split at L changes the order of the softmax sums, so the result equals plain attention
// within rounding (about 1e-6 relative), not bitwise: the second tier of kvheap's equality.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "base/dtype.hpp"
#include "kernels/cuda_stream.hpp"

namespace kvheap {

/// \brief Query heads one block of the GPU decode-attention kernel holds at `head_dim`
/// (cuda::detail::max_heads_per_block, decode_attention.cuh): a wider group is cut into slices
/// that each read the cache rows again.
inline constexpr int gpu_heads_per_block(int head_dim) { return head_dim > 128 ? 8 : 16; }
/// \brief gpu_heads_per_block for head_dims up to 128 (Llama's and most models').
inline constexpr int kGpuHeadsPerBlock = gpu_heads_per_block(128);
/// \brief Query heads per KV head one block of the GPU's tensor-core prefix pass holds
/// (cuda::detail::kProductRows, prefix_product.cuh): 16 per warp, 8 warps.
inline constexpr int kPrefixProductRows = 128;
/// \brief Query heads of each slice when `heads` query heads of one KV head are cut into slices of
/// at most `most`: as few slices as that allows, made even (cuda::detail::plan_attention's rule;
/// 24 heads at most 16 make two slices of 12). No heads (a batch with no group) make no slice: 0.
inline constexpr int slice_heads(int heads, int most) {
  if (heads <= 0 || most <= 0) return 0;
  const int slices = (heads + most - 1) / most;
  return (heads + slices - 1) / slices;
}

/// \brief Which batch rows share which prefixes (host arrays; CSR over groups): a tree.
///
/// Group g is rows[indptr[g] .. indptr[g+1]), all of which read the same physical blocks for
/// positions [prefix_begin[g], prefix_begin[g] + prefix_len[g]): a whole number of blocks that no
/// row of the group attends to fewer of. A group that begins at 0 is a root (a system prompt);
/// one that begins later shares the next level (a document after it) among some of its parent's
/// rows, and begins where its parent ends. A row is in one group per level of its path, parents
/// first (the groups are in that order), and reads its positions past its deepest group alone.
/// Rows in no group read their whole context alone.
struct SharedPrefixPlan {
  std::vector<int> indptr = {0};  ///< [groups + 1]
  std::vector<int> rows;          ///< [rows in groups] batch row ids, by group
  std::vector<int> prefix_len;    ///< [groups] positions the group shares
  std::vector<int> prefix_begin;  ///< [groups] the first of them: 0 at the top of a tree

  /// \brief Position after group g's shared positions: where its row's next level, or own
  /// positions, begin.
  [[nodiscard]] int prefix_end(int g) const { return prefix_begin[g] + prefix_len[g]; }

  /// \brief Number of groups.
  [[nodiscard]] int groups() const { return static_cast<int>(prefix_len.size()); }

  /// \brief Each batch row's path through the tree: the groups it is in, parents first.
  struct Paths {
    std::vector<int> at;      ///< [n + 1] row i's entries are at[i] .. at[i + 1]
    std::vector<int> group;   ///< [rows in groups] the group of each entry
    std::vector<int> member;  ///< [rows in groups] the row's index within that group
    std::vector<int> first;   ///< [n] where each row's own positions begin (0 in no group)
  };
  /// \brief The paths of a batch of `n` rows (every row id in `rows` below n).
  [[nodiscard]] Paths paths(int n) const {
    Paths p;
    p.at.assign(n + 1, 0);
    for (int r : rows) ++p.at[r + 1];
    for (int i = 0; i < n; ++i) p.at[i + 1] += p.at[i];
    p.group.resize(rows.size());
    p.member.resize(rows.size());
    p.first.assign(n, 0);
    std::vector<int> filled(p.at.begin(), p.at.end() - 1);
    for (int g = 0; g < groups(); ++g)  // parents come first, so each row's path is in order
      for (int k = indptr[g]; k < indptr[g + 1]; ++k) {
        const int i = rows[k];
        p.first[i] = std::max(p.first[i], prefix_end(g));
        p.group[filled[i]] = g;
        p.member[filled[i]++] = k - indptr[g];
      }
    return p;
  }
  /// \brief Positions attention reads for a batch whose row i attends n_ctx[i] positions: each
  /// group's shared positions once, plus every row's positions outside its groups. With
  /// `most_heads` > 0 (the GPU kernel's limit, gpu_heads_per_block), the prefix pass's wide row
  /// (the widest group's rows x `group` query heads per KV head) is cut into even slices of
  /// slice_heads(widest x group, most_heads) heads, and a group of r rows reads its prefix once
  /// per slice holding one of its r x group real heads.
  [[nodiscard]] long positions_read(const std::vector<int>& n_ctx, int group = 1,
                                    int most_heads = 0) const {
    long total = 0;
    for (int c : n_ctx) total += c;
    const long per_slice = slice_of(group, most_heads);
    for (int g = 0; g < groups(); ++g)
      total -= (rows_in(g) - reads(g, group, per_slice)) * prefix_len[g];
    return total;
  }
  /// \brief The shared positions of positions_read, by level of the tree (top level first):
  /// each group's positions times the times it is read (once, or once per slice as there).
  [[nodiscard]] std::vector<long> positions_read_by_level(int group = 1, int most_heads = 0) const {
    const long per_slice = slice_of(group, most_heads);
    std::vector<long> by_level;
    // Levels seen so far by each row: parents come first, so a group's depth is its rows'.
    std::vector<int> depth_of_row(rows.empty() ? 0
                                               : *std::max_element(rows.begin(), rows.end()) + 1);
    for (int g = 0; g < groups(); ++g) {
      const int depth = depth_of_row[rows[indptr[g]]];
      for (int k = indptr[g]; k < indptr[g + 1]; ++k) ++depth_of_row[rows[k]];
      if (depth >= static_cast<int>(by_level.size())) by_level.resize(depth + 1, 0);
      by_level[depth] += reads(g, group, per_slice) * prefix_len[g];
    }
    return by_level;
  }

 private:
  [[nodiscard]] long rows_in(int g) const { return indptr[g + 1] - indptr[g]; }
  /// Query heads of each slice of the prefix pass's wide row (0: no slicing).
  [[nodiscard]] long slice_of(int group, int most_heads) const {
    int widest = 0;
    for (int g = 0; g < groups(); ++g) widest = std::max(widest, indptr[g + 1] - indptr[g]);
    return most_heads > 0 ? slice_heads(widest * group, most_heads) : 0;
  }
  /// Times group g's positions are read: once per slice that holds one of its real heads.
  [[nodiscard]] long reads(int g, int group, long per_slice) const {
    return per_slice > 0 ? (rows_in(g) * group + per_slice - 1) / per_slice : 1;
  }
};

/// \brief The device-side view of a SharedPrefixPlan for a batch of n rows (pointers are device
/// memory; the counts are host values).
struct SharedPrefixView {
  int groups = 0;                     ///< G
  int widest = 0;                     ///< rows in the largest group
  int max_prefix = 0;                 ///< longest prefix_len (sizes the prefix pass's split-K)
  int max_own = 0;                    ///< longest own_ctx (sizes the rows' pass's split-K)
  const int* prefix_len = nullptr;    ///< [G] positions each group shares
  const int* prefix_begin = nullptr;  ///< [G] the first of them
  const int* prefix_seq = nullptr;    ///< [G] the sequence whose page table the prefix pass reads
  const int* group_rows = nullptr;    ///< [G, widest] each group's batch rows, -1 past its size
  const int* group_size = nullptr;    ///< [G] rows in each group
  const int* first = nullptr;         ///< [n] first position of each row's own pass
  const int* own_ctx = nullptr;       ///< [n] positions of each row's own pass: n_ctx - first
  const int* path_at = nullptr;       ///< [n + 1] row i's groups: path entries path_at[i] ..
  const int* path_group = nullptr;    ///< [rows in groups] the group of each path entry
  const int* path_member = nullptr;   ///< [rows in groups] the row's index within that group
};

/// \brief Host arrays behind a SharedPrefixView, built from a plan and the batch's row-to-sequence
/// map and context lengths.
struct SharedPrefixArrays {
  int widest = 0;                 ///< rows in the largest group
  std::vector<int> prefix_len;    ///< [G]
  std::vector<int> prefix_begin;  ///< [G]
  std::vector<int> prefix_seq;    ///< [G]
  std::vector<int> group_rows;    ///< [G * widest]
  std::vector<int> group_size;    ///< [G]
  std::vector<int> first;         ///< [n]
  std::vector<int> own_ctx;       ///< [n]
  std::vector<int> path_at;       ///< [n + 1]
  std::vector<int> path_group;    ///< [rows in groups], by row, parents first
  std::vector<int> path_member;   ///< [rows in groups]

  /// \brief Builds the arrays; row_seq[i] and n_ctx[i] describe batch row i.
  SharedPrefixArrays(const SharedPrefixPlan& plan, const std::vector<int>& row_seq,
                     const std::vector<int>& n_ctx) {
    const int n = static_cast<int>(n_ctx.size()), G = plan.groups();
    for (int g = 0; g < G; ++g) widest = std::max(widest, plan.indptr[g + 1] - plan.indptr[g]);
    prefix_len = plan.prefix_len;
    prefix_begin = plan.prefix_begin;
    group_rows.assign(static_cast<std::size_t>(G) * widest, -1);
    SharedPrefixPlan::Paths p = plan.paths(n);
    path_at = std::move(p.at);
    path_group = std::move(p.group);
    path_member = std::move(p.member);
    first = std::move(p.first);
    for (int g = 0; g < G; ++g) {
      prefix_seq.push_back(row_seq[plan.rows[plan.indptr[g]]]);
      group_size.push_back(plan.indptr[g + 1] - plan.indptr[g]);
      for (int k = plan.indptr[g]; k < plan.indptr[g + 1]; ++k)
        group_rows[static_cast<std::size_t>(g) * widest + (k - plan.indptr[g])] = plan.rows[k];
    }
    own_ctx.resize(n);
    for (int i = 0; i < n; ++i) own_ctx[i] = n_ctx[i] - first[i];
  }
};

struct PagedLocator;  // kernels/paged_attention.hpp
class SideStream;     // device/device.hpp (device builds only)

namespace cuda {

struct AttentionShape;     // kernels/decode_attention.hpp (device builds only)
class AttentionWorkspace;  // kernels/decode_attention.hpp

/// \brief Floats of the wide queries shared_prefix_attention gathers: groups x widest x n_heads x
/// head_dim.
inline std::size_t shared_prefix_wide_q_floats(int groups, int widest, int n_heads, int head_dim) {
  return static_cast<std::size_t>(groups) * widest * n_heads * head_dim;
}

/// \brief Whether shared_prefix_attention's prefix pass is the tensor-core product
/// (prefix_product.cuh) for a `kv` cache at `head_dim` on the current device: fp16 or bf16,
/// head_dim 64 or 128, and compute capability 8.0 or later (always in the simulator).
bool prefix_pass_is_product(DType kv, int head_dim);

/// \brief Query heads per KV head for which the prefix pass reads a group's prefix once, on the
/// current device: kPrefixProductRows for the product, gpu_heads_per_block(head_dim) for the
/// decode kernel.
/// SharedPrefixPlan::positions_read takes it as `most_heads`.
int prefix_heads_per_read(DType kv, int head_dim);

/// \brief Decode attention over a paged cache in which the groups of `plan` read their shared
/// prefix once (GPU; the CPU twin is cpu::attend_batch_shared_prefix).
///
/// Four launches: the rows' pass over every row's positions [first, n_ctx) through a locator that
/// offsets positions (on `side` when given), a gather of the wide queries (n_heads x widest query
/// heads per group, into `wide_q`), the prefix pass over one wide row per group through the page
/// table of the group's first sequence, and a merge of both passes' unnormalised partial states
/// per (row, head). The prefix pass is the tensor-core product of prefix_product.cuh where
/// prefix_pass_is_product says so, else chapter 2's decode kernel; the rows' pass is always the
/// decode kernel. A group wider than prefix_heads_per_read query heads per KV head (128 for the
/// product; 16 for the decode kernel, 8 above head_dim 128) is cut into slices that each read the
/// prefix: wide rows are padded to the widest group and cut into even slices (slice_heads), and a
/// group reads its prefix once per slice that holds one of its real heads
/// (SharedPrefixPlan::positions_read), not once per row; a slice of padding reads nothing.
///
/// Equality: within about 1e-6 relative of plain attention for fp32 caches and for the decode
/// kernel; the product rounds the queries and the softmax weights to the cache type: within 1e-2
/// relative for bf16 and 2e-3 for fp16 in tests/chapters/test_ch04_shared_gpu.cpp (tier 2), an
/// error that grows with the spread of the scores (chapter 4's page has the measurements).
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
/// \param side    when given, the rows' own pass runs on it, forked from `stream` before the
///                prefix pass and joined back before the merge, so that a GPU may run the two
///                passes at the same time; else every launch is on `stream`, one after another
void shared_prefix_attention(DType kv, const float* q, const void* k_cache, const void* v_cache,
                             const PagedLocator& pages, const SharedPrefixView& plan,
                             const AttentionShape& shape, float* out, float* wide_q,
                             AttentionWorkspace& prefix_ws, AttentionWorkspace& own_ws,
                             StreamHandle stream = nullptr, int force_splits = 0,
                             SideStream* side = nullptr);

}  // namespace cuda
}  // namespace kvheap
