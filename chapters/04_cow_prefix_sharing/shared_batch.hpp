// What a sharing cache needs for one batch: chapter 3's page tables and slot mapping, plus the
// copy-on-write copies to make before any row writes.
#pragma once

#include <vector>

#include "chapters/03_paged_blocks/paged_batch.hpp"
#include "chapters/04_cow_prefix_sharing/shared_block_manager.hpp"
#include "common/batch.hpp"
#include "kernels/shared_prefix_attention.hpp"

namespace kvheap::ch04 {

/// \brief A batch's page tables (CSR) and slot mapping, the copies its appends asked for, and
/// which rows share a prefix.
struct SharedBatch {
  ch03::PagedBatch pages;         ///< as chapter 3 builds it
  std::vector<BlockCopy> copies;  ///< to make, in order, before the batch's first write
  SharedPrefixPlan prefixes;      ///< rows that read the same first blocks (plan_shared_prefixes)
};

/// \brief Positions one layer's attention reads for `batch`: each shared prefix once when
/// `read_once` (or once per slice of `heads_per_pass` query heads, see
/// SharedPrefixPlan::positions_read), else every row's whole context.
[[nodiscard]] long positions_read(const SharedBatch& batch, bool read_once, int group = 1,
                                  int heads_per_pass = 0);

/// \brief Groups the rows of `pages` whose sequences hold the same physical first blocks.
///
/// Rows are grouped by their sequence's first block; a group's prefix is the run of blocks that
/// all its sequences' page tables begin with, cut to the whole blocks its shortest row attends
/// to. Only groups of at least two sequences with a prefix of at least one block are kept: one
/// level of sharing, enough for forks of a prompt and prompts that begin alike.
SharedPrefixPlan plan_shared_prefixes(const ch03::PagedBatch& pages, int block_size);

/// \brief Appends every row's token to its sequence and builds the batch's view.
///
/// Each row must write its sequence's next position, in order: a position a sequence holds may be
/// shared, so it is never rewritten here (InputError names the row). When the pool cannot supply
/// the new blocks and copies the batch needs, even by evicting cached blocks, it throws
/// ResourceError before any sequence grows.
SharedBatch build_shared_batch(SharedBlockManager& blocks, const Batch& batch);

}  // namespace kvheap::ch04
