#include "chapters/03_paged_blocks/paged_cache.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.hpp"

namespace kvheap::ch03 {

KVView paged_view(BlockManager& blocks, const Batch& batch) {
  // All or nothing: the blocks the new positions need are counted first, so a batch the pool
  // cannot hold leaves every sequence as it was, not grown by the rows before the one that ran out.
  long new_blocks = 0;
  const auto lengths = lengths_after(batch, [&](int seq) { return blocks.length(seq); });
  for (const auto& [seq, len] : lengths)
    new_blocks +=
        std::max(0L, blocks.blocks_for(len) - static_cast<long>(blocks.page_table(seq).size()));
  if (new_blocks > blocks.pool().num_free())
    throw ResourceError(
        fmt::format("block pool exhausted: the batch needs {} new blocks of {} slots and {} of {} "
                    "are free; no sequence was grown",
                    new_blocks, blocks.pool().block_size(), blocks.pool().num_free(),
                    blocks.pool().num_blocks()));
  KVView view;
  view.slot_mapping.resize(batch.size());
  for (int i = 0; i < batch.size(); ++i) {
    const BatchRow& r = batch.rows[i];
    view.slot_mapping[i] = r.pos == blocks.length(r.seq)
                               ? blocks.append_slot(r.seq)      // cannot run out: counted above
                               : blocks.slot_of(r.seq, r.pos);  // rewriting a cached position
  }
  // Built after the appends, so every row sees its sequence's page table for this batch.
  add_page_tables(
      view, batch, blocks.pool().block_size(),
      [&](int seq) -> const std::vector<int>& { return blocks.page_table(seq); },
      [&](int seq) { return blocks.length(seq); });
  return view;
}

PagedCache::PagedCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
                       std::uint64_t shuffle_seed, Memory memory)
    : StorageCache(
          make_storage(memory, config, kv, std::int64_t{num_blocks} * block_size,
                       fmt::format("KV pool of {} blocks x {} tokens", num_blocks, block_size))),
      bytes_per_token_(kv_bytes_per_token(config, kv)),
      blocks_(num_blocks, block_size, shuffle_seed) {}

std::size_t PagedCache::bytes_reserved() const { return blocks_.slots_held() * bytes_per_token_; }

std::size_t PagedCache::bytes_used() const { return blocks_.tokens_held() * bytes_per_token_; }

}  // namespace kvheap::ch03
