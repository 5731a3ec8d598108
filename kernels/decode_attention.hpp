// Decode attention on the GPU: every batch row attends over its own sequence's cached K and V.
//
// The kernel body (kernels/decode_attention.cuh) never sees the cache layout. It asks a *row
// locator* where position t of batch row i lives, as a row index into the cache viewed as
// [rows, n_kv_heads, head_dim]:
//
//   chapter 2, contiguous reservation: row(i, t) = base_row[i] + t      (ContiguousLocator, here)
//   chapter 3, paged blocks:           row(i, t) = indices[indptr[i] + t / B] * B + t % B
//
// A locator is a small trivially copyable struct, passed to the kernel by value, whose
// `KVHEAP_HD Rows rows_of(int i) const` reads what row i's addresses depend on (its base row, its
// page table's start) and returns them as a small `Rows` value with a `KVHEAP_HD std::int64_t
// at(int t) const` method. The kernel calls rows_of once per block, before its position loop, so
// those lookups are not repeated for every position. Everything else (the grouped-query mapping,
// online softmax, split-K and the merge) is shared, so a new layout costs one struct.
//
// Numerics: scores, softmax and the weighted sum are fp32 whatever the KV dtype; fp16/bf16 values
// are widened exactly. The result equals the CPU twin kvheap::cpu::attend_kv_heads (kernels/
// attention.hpp) on the same cache contents within about 1e-6 relative: only the summation order
// differs (tree reductions instead of left-to-right sums, and expf with at most 2 ulp error).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.hpp"
#include "device/buffers.hpp"
#include "kernels/attention_merge.hpp"
#include "kernels/cuda_stream.hpp"
#include "kernels/host_device.hpp"

namespace kvheap::cuda {

/// \brief Row locator of the contiguous per-sequence reservation (chapter 2): batch row i's
/// sequence occupies consecutive cache rows starting at base_row[i].
///
/// With caches laid out [max_slots, max_seq_len, n_kv_heads, head_dim],
/// base_row[i] = slot(i) * max_seq_len.
struct ContiguousLocator {
  const std::int64_t* base_row;  ///< [n] device memory: first cache row of row i's sequence

  /// \brief One batch row's positions: base_row[i], read once.
  struct Rows {
    std::int64_t base = 0;  ///< first cache row of the row's sequence
    /// \brief Cache row of position t.
    KVHEAP_HD std::int64_t at(int t) const { return base + t; }
  };
  /// \brief The positions of batch row i.
  KVHEAP_HD Rows rows_of(int i) const { return Rows{base_row[i]}; }
};

/// \brief Device scratch of split-K attention: per (split, row, query head) a softmax state and
/// an unnormalised accumulator. Grows on demand, never shrinks; move-only.
///
/// Growing frees the old buffers with cudaFree, which waits for the device, so work already queued
/// on any stream that still reads them finishes first.
class AttentionWorkspace {
 public:
  AttentionWorkspace() = default;

  /// \brief Makes room for `partials` (split, row, head) entries of `head_dim` floats each.
  void reserve(std::size_t partials, int head_dim);

  /// \brief [partials, head_dim] unnormalised outputs (device memory).
  [[nodiscard]] float* acc() noexcept { return acc_.data(); }
  /// \brief [partials] running max and sum (device memory).
  [[nodiscard]] SoftmaxState* states() noexcept { return states_.data(); }
  /// \brief Bytes of device memory held.
  [[nodiscard]] std::size_t bytes() const noexcept { return acc_.bytes() + states_.bytes(); }

 private:
  DeviceBuffer<float> acc_;
  DeviceBuffer<SoftmaxState> states_;
};

/// \brief Problem sizes of one decode-attention call.
struct AttentionShape {
  int n = 0;           ///< batch rows (query tokens)
  int n_heads = 0;     ///< query heads; a multiple of n_kv_heads
  int n_kv_heads = 0;  ///< KV heads
  int head_dim = 0;    ///< a multiple of 8, at most 256 (64 and 128 have specialised kernels)
  int max_n_ctx = 0;   ///< the largest n_ctx[i]: only sizes the split-K decision
};

/// \brief Causal grouped-query attention of `n` query rows over the contiguous cache.
///
/// Row i attends over positions 0..n_ctx[i]-1 of its sequence; a prefill row at position p has
/// n_ctx = p + 1, and all rows' K/V must already be in the cache (cuda::kv_write). Rows with
/// n_ctx[i] = 0 get zeros. All pointers are device memory.
///
/// \param kv           element type of the caches
/// \param q            [n, n_heads, head_dim] fp32, RoPE applied
/// \param k_cache      [max_slots * max_seq_len, n_kv_heads, head_dim] in the KV dtype
/// \param v_cache      [max_slots * max_seq_len, n_kv_heads, head_dim] in the KV dtype
/// \param n_ctx        [n] positions each row attends over
/// \param base_row     [n] first cache row of each row's sequence (slot * max_seq_len)
/// \param out          [n, n_heads, head_dim] fp32, written
/// \param workspace    split-K scratch, grown when needed
/// \param force_splits > 0: split every context into exactly this many chunks (tests); 0: choose
///                     with choose_num_splits from the device's SM count and the kernel's
///                     occupancy (plan_attention)
void decode_attention(DType kv, const float* q, const void* k_cache, const void* v_cache,
                      const int* n_ctx, const std::int64_t* base_row, const AttentionShape& shape,
                      float* out, AttentionWorkspace& workspace, StreamHandle stream = nullptr,
                      int force_splits = 0);

namespace detail {

/// \brief How a decode-attention launch is cut up; the same for every locator.
struct AttentionPlan {
  int heads_per_block = 0;  ///< query heads one block handles (the group, or a slice of it)
  int chunks = 0;           ///< blocks per (row, KV head): group / heads_per_block, rounded up
  int splits = 0;           ///< context chunks per block (split-K); 1 = single pass
};

/// \brief Most query heads one block holds (decode_attention.cuh): 16, or 8 above head_dim 128,
/// where 16 heads' queries and outputs would not fit a lane's registers. A wider group is cut
/// into slices that each read the cache rows again.
constexpr int max_heads_per_block(int head_dim) { return head_dim > 128 ? 8 : 16; }

/// \brief Fewest positions a split-K chunk may have: 256.
///
/// Two costs set it. A chunk's partial result (G x head_dim floats, written, then read by the
/// merge) stays within an eighth of the K and V bytes it reads at a 2-byte KV type for every group
/// a block holds (G <= 16: 2 x 16 x head_dim x 4 B <= 256 x 2 x head_dim x 2 B / 8 x 2). And the
/// kernel's pipeline fills before its first wait (kStages - 1 tiles of decode_attention.cuh): at
/// bf16 and head_dim 128, 256 positions are 8 tiles, so the fill is at most a quarter of a chunk.
constexpr int min_split_positions() { return 256; }

/// \brief Blocks of the decode-attention kernel for (head_dim, heads per block) that one SM of the
/// current device holds at once: the fewest over the KV types, of the contiguous layout's kernel
/// (the generic head_dim's at its largest, 256). Asked of the device once, then remembered.
int attention_blocks_per_sm(int head_dim, int heads_per_block);

/// \brief Validates `shape` (throws InputError naming the bad field) and picks the plan.
///
/// The split count fills one wave of the current device: its SM count times the blocks per SM of
/// the contiguous kernel for this head_dim and group, the fewest over the KV types
/// (cudaOccupancyMaxActiveBlocksPerMultiprocessor), so that the plan depends on the shape alone
/// and every layout splits alike.
AttentionPlan plan_attention(const AttentionShape& shape, int force_splits);

/// \brief Second pass of split-K: out = merge over splits of (state, acc), normalised.
/// \param states [splits, rows] partial softmax states
/// \param acc    [splits, rows, head_dim] unnormalised partial outputs
/// \param out    [rows, head_dim] written
void merge_splits(const SoftmaxState* states, const float* acc, float* out, int splits, int rows,
                  int head_dim, StreamHandle stream);

}  // namespace detail
}  // namespace kvheap::cuda
