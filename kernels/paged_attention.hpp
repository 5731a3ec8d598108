// The paged view of a KV cache that kernels receive, and the CPU twin's row accessor over it.
//
// Page tables travel to kernels as a plain struct in CSR form, usable on host and device:
//
//   indptr        [num_seqs + 1]   sequence s owns indices[indptr[s] .. indptr[s+1])
//   indices       [total pages]    physical block ids, in logical order
//   last_page_len [num_seqs]       filled slots of each sequence's last block
//   row_seq       [n]              which sequence each batch row belongs to
//
// A position t of batch row i lives in physical slot
//   indices[indptr[row_seq[i]] + t / block_size] * block_size + t % block_size
// of a storage laid out [num_blocks, block_size, n_kv_heads, head_dim].
//
// cuda::paged_attention (paged_attention.cu) is chapter 2's decode-attention kernel instantiated
// with PagedLocator: same work split, same arithmetic, so on the same cache contents and split
// count its output is bitwise equal to cuda::decode_attention's. It is declared here with the
// CUDA-side types only forward-declared, so CPU-only builds can include this header.
#pragma once

#include <bit>
#include <cstdint>

#include "base/dtype.hpp"
#include "kernels/cuda_stream.hpp"
#include "kernels/host_device.hpp"

namespace kvheap {

/// \brief Physical slot of position t of a sequence whose page table is `pages`:
/// pages[t / block_size] * block_size + t % block_size, for block_size >= 1.
///
/// Power-of-two block sizes (the usual ones) take a shift and a mask: an integer division costs
/// tens of cycles on a CPU and about twenty instructions on a GPU, as much as the attention
/// arithmetic a small head spends on one position. The branch goes the same way for every
/// position (and every lane of a warp), so it is all but free.
KVHEAP_HD std::int64_t paged_slot(const int* pages, int block_size, int t) {
  if ((block_size & (block_size - 1)) == 0) {
#if defined(__CUDA_ARCH__)
    const int shift = __popc(block_size - 1);
#else
    const int shift = std::popcount(static_cast<unsigned>(block_size - 1));
#endif
    return (static_cast<std::int64_t>(pages[t >> shift]) << shift) | (t & (block_size - 1));
  }
  return static_cast<std::int64_t>(pages[t / block_size]) * block_size + t % block_size;
}

/// \brief One row's page table as the attention kernel stages it in shared memory: position t
/// lives in block pages[(t + first) / block_size], slot (t + first) % block_size.
struct PageView {
  const int* pages = nullptr;  ///< physical block ids, logical order
  int block_size = 1;          ///< slots per block
  int first = 0;               ///< position 0's place in the sequence (chapter 4's own pass)
};

/// \brief Row locator over page tables (CSR), for the attention kernels' `rows_of(i).at(t)`
/// interface.
struct PagedLocator {
  const int* indptr = nullptr;         ///< [num_seqs + 1]
  const int* indices = nullptr;        ///< [indptr[num_seqs]] physical block ids
  const int* last_page_len = nullptr;  ///< [num_seqs] slots used in the page of the last token
  const int* row_seq = nullptr;        ///< [n] sequence of each batch row
  int block_size = 0;                  ///< slots per block

  /// \brief One batch row's positions: its page table, found once (row_seq, then indptr).
  struct Rows {
    const int* pages = nullptr;  ///< the row's sequence's physical block ids, logical order
    int block_size = 1;          ///< slots per block
    /// \brief Physical slot (row of the [num_blocks * block_size, kv_dim] storage) of
    /// position t.
    KVHEAP_HD std::int64_t at(int t) const { return paged_slot(pages, block_size, t); }
    /// \brief The table, for the kernel to stage a window of it at a time.
    KVHEAP_HD PageView page_view() const { return PageView{pages, block_size, 0}; }
  };
  /// \brief The positions of batch row i.
  KVHEAP_HD Rows rows_of(int i) const { return Rows{indices + indptr[row_seq[i]], block_size}; }
};

namespace cpu {

/// \brief The CPU twin's accessor for one sequence's pages: the same arithmetic as
/// ContiguousRows, only the address of position t differs.
template <class T>
struct PagedRows {
  const T* k_base;   ///< [num_blocks * block_size, kv_dim] K storage of one layer
  const T* v_base;   ///< same layout, V
  const int* pages;  ///< this sequence's physical block ids, logical order
  int block_size;    ///< slots per block
  long stride;       ///< elements per slot (kv_dim)
  /// \brief Position t's K row.
  const T* k(int t) const { return k_base + slot(t) * stride; }
  /// \brief Position t's V row.
  const T* v(int t) const { return v_base + slot(t) * stride; }
  /// \brief Physical slot of position t.
  long slot(int t) const { return static_cast<long>(paged_slot(pages, block_size, t)); }
  /// \brief Whether two accessors read the same rows.
  bool operator==(const PagedRows&) const = default;
};

}  // namespace cpu

namespace cuda {

struct AttentionShape;     // kernels/decode_attention.hpp (device builds only)
class AttentionWorkspace;  // kernels/decode_attention.hpp

/// \brief Causal grouped-query decode attention of `shape.n` query rows over a paged cache.
///
/// The same kernel, plan and split-K merge as cuda::decode_attention; only the address of
/// position t of row i comes from `pages` (which holds device pointers). Row i attends over
/// positions 0..n_ctx[i]-1 of its sequence, whose K and V must already be in the pool
/// (cuda::kv_write with the slot mapping as dst_rows). All pointers are device memory.
///
/// \param kv           element type of the pool
/// \param q            [n, n_heads, head_dim] fp32, RoPE applied
/// \param k_cache      [num_blocks, block_size, n_kv_heads, head_dim] one layer, in the KV dtype
/// \param v_cache      [num_blocks, block_size, n_kv_heads, head_dim] same layout
/// \param n_ctx        [n] positions each row attends over
/// \param pages        page tables in CSR form and the row-to-sequence map (device pointers)
/// \param shape        problem sizes; shape.max_n_ctx sizes the split-K decision
/// \param out          [n, n_heads, head_dim] fp32, written
/// \param workspace    split-K scratch, grown when needed
/// \param stream       stream to run on
/// \param force_splits > 0: exactly this many context chunks (tests); 0: chosen per device
///
/// Throws InputError for a shape the kernel cannot run or a block size below 1.
void paged_attention(DType kv, const float* q, const void* k_cache, const void* v_cache,
                     const int* n_ctx, const PagedLocator& pages, const AttentionShape& shape,
                     float* out, AttentionWorkspace& workspace, StreamHandle stream = nullptr,
                     int force_splits = 0);

}  // namespace cuda
}  // namespace kvheap
