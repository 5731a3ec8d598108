#include "chapters/03_paged_blocks/paged_batch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "base/error.hpp"

namespace kvheap::ch03 {

PagedBatch build_paged_batch(BlockManager& blocks, const Batch& batch) {
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
  PagedBatch pb;
  pb.slot_mapping.resize(batch.size());
  for (int i = 0; i < batch.size(); ++i) {
    const BatchRow& r = batch.rows[i];
    pb.slot_mapping[i] = r.pos == blocks.length(r.slot)
                             ? blocks.append_slot(r.slot)      // cannot run out: counted above
                             : blocks.slot_of(r.slot, r.pos);  // rewriting a cached position
  }
  add_page_tables(
      pb, batch, blocks.pool().block_size(),
      [&](int seq) -> const std::vector<int>& { return blocks.page_table(seq); },
      [&](int seq) { return blocks.length(seq); });
  return pb;
}

void add_page_tables(PagedBatch& pb, const Batch& batch, int block_size,
                     const std::function<const std::vector<int>&(int)>& pages_of,
                     const std::function<int(int)>& length_of) {
  const int n = batch.size();
  pb.row_seq.resize(n);
  pb.n_ctx.resize(n);
  pb.max_ctx = 0;
  for (int i = 0; i < n; ++i) {
    pb.n_ctx[i] = batch.rows[i].pos + 1;
    pb.max_ctx = std::max(pb.max_ctx, pb.n_ctx[i]);
  }
  // CSR over the distinct sequences, in order of first appearance; built after the appends so
  // every row sees its sequence's final page table for this batch.
  std::unordered_map<int, int> index_of;
  pb.indptr.assign(1, 0);
  pb.indices.clear();
  pb.last_page_len.clear();
  for (int i = 0; i < n; ++i) {
    const int seq = batch.rows[i].slot;
    auto [it, fresh] = index_of.try_emplace(seq, static_cast<int>(pb.last_page_len.size()));
    if (fresh) {
      const std::vector<int>& pages = pages_of(seq);
      pb.indices.insert(pb.indices.end(), pages.begin(), pages.end());
      pb.indptr.push_back(static_cast<int>(pb.indices.size()));
      const int len = length_of(seq);
      pb.last_page_len.push_back(len == 0 ? 0 : (len - 1) % block_size + 1);
    }
    pb.row_seq[i] = it->second;
  }
}

}  // namespace kvheap::ch03
