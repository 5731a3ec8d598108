// Paged decode attention (chapter 3): chapter 2's decode-attention kernel instantiated with the
// page-table row locator. Its CPU twin is cpu::attend_batch (decode_attention_cpu.hpp) reading
// through cpu::PagedRows (paged_attention.hpp): the same arithmetic as chapter 2's twin.
//
// Nothing about the algorithm changes with paging. The kernel body (decode_attention.cuh) asks its
// locator where position t of batch row i lives; PagedLocator answers with one lookup in the page
// table, indices[indptr[row_seq[i]] + t / block_size], instead of chapter 2's base_row[i] + t.
// row_seq[i] and indptr[...] are read once per block (rows_of); the kernel stages a window of the
// row's page ids in shared memory and turns each tile position into its row's byte offset one
// pipeline stage before the copies that use it, so the tile loop reads no page id from global
// memory and costs within a few per cent of the contiguous loop. The KernelCode tests check the
// machine code of both loops for that (tests/kernels/check_attention_loop.py).
//
// Bitwise equality with the contiguous cache follows: the same plan (it depends only on the
// shape), the same per-lane positions, the same reduction trees and merges, and every rounding
// spelled out (mul_rn, fma_rn), so the compiler's different unrolling of the two instantiations
// cannot fuse a multiply and an add in one and not the other; only the addresses the K and V
// vectors come from differ.
#include "device/cuda_compat.hpp"

#include <string>

#include "base/error.hpp"
#include "kernels/decode_attention_launch.cuh"
#include "kernels/paged_attention.hpp"

namespace kvheap::cuda {

void paged_attention(DType kv, const float* q, const void* k_cache, const void* v_cache,
                     const int* n_ctx, const PagedLocator& pages, const AttentionShape& shape,
                     float* out, AttentionWorkspace& workspace, StreamHandle stream,
                     int force_splits) {
  // A block size of 0 would divide by zero inside the kernel; say so on the host instead.
  if (shape.n > 0 && pages.block_size <= 0)
    throw InputError("paged_attention: block_size = " + std::to_string(pages.block_size) +
                     "; need at least one slot per block");
  if (shape.n > 0 &&
      (pages.indptr == nullptr || pages.indices == nullptr || pages.row_seq == nullptr))
    throw InputError("paged_attention: the page table (indptr, indices, row_seq) is missing");
  if (shape.n > 0) detail::check_page_bytes("paged_attention", pages.block_size, shape, kv);
  detail::launch_decode_attention(kv, q, k_cache, v_cache, n_ctx, pages, shape, out, workspace,
                                  stream, force_splits);
}

namespace detail {

int paged_blocks_per_sm(int head_dim, int g) {
  return layout_blocks_per_sm<PagedLocator>(head_dim, g);
}

}  // namespace detail
}  // namespace kvheap::cuda
