// What a paged cache uploads for one batch: page tables in CSR form and the slot each row writes.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "chapters/03_paged_blocks/block_manager.hpp"
#include "common/batch.hpp"

namespace kvheap::ch03 {

/// \brief Host copies of the arrays behind a PagedLocator, plus the slot mapping of the writes.
struct PagedBatch {
  std::vector<int> indptr;                 ///< [num_seqs + 1]
  std::vector<int> indices;                ///< [total pages] physical block ids
  std::vector<int> last_page_len;          ///< [num_seqs]
  std::vector<int> row_seq;                ///< [n] index into indptr of each row's sequence
  std::vector<int> n_ctx;                  ///< [n] positions each row attends: pos + 1
  std::vector<std::int64_t> slot_mapping;  ///< [n] physical slot each row's K and V go to
  int max_ctx = 0;                         ///< longest n_ctx
};

/// \brief Grows each row's sequence to cover its position (append_slot for a new position,
/// slot_of for one already written) and builds the CSR view of every sequence in the batch.
///
/// Rows of one sequence must come in increasing position order, each position once, and a new
/// position must be the sequence's next one; else InputError. When the pool cannot hold the
/// batch's new positions it throws ResourceError before growing any sequence, so a failed batch
/// changes nothing.
PagedBatch build_paged_batch(BlockManager& blocks, const Batch& batch);

/// \brief Fills `row_seq`, `n_ctx`, `max_ctx` and the CSR arrays of `pb` for `batch`, whose
/// sequences already hold every position their rows write: `pages_of(seq)` is a sequence's page
/// table and `length_of(seq)` its length. Sequences are numbered in order of first appearance.
/// Any allocator with page tables builds its batch with this (chapter 4's sharing one too).
void add_page_tables(PagedBatch& pb, const Batch& batch, int block_size,
                     const std::function<const std::vector<int>&(int)>& pages_of,
                     const std::function<int(int)>& length_of);

}  // namespace kvheap::ch03
