#include "chapters/03_paged_blocks/paged_batch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "common/error.hpp"

namespace kvheap::ch03 {

PagedBatch build_paged_batch(BlockManager& blocks, const Batch& batch) {
  PagedBatch pb;
  const int n = batch.size();
  pb.row_seq.resize(n);
  pb.n_ctx.resize(n);
  pb.slot_mapping.resize(n);
  for (int i = 0; i < n; ++i) {
    const BatchRow& r = batch.rows[i];
    const int len = blocks.length(r.slot);
    if (r.pos == len) {
      pb.slot_mapping[i] = blocks.append_slot(r.slot);
    } else if (r.pos < len) {
      pb.slot_mapping[i] = blocks.slot_of(r.slot, r.pos);  // rewriting a cached position
    } else {
      throw InputError(
          fmt::format("batch row {} writes position {} of sequence {}, but its next "
                      "position is {}: positions must be contiguous",
                      i, r.pos, r.slot, len));
    }
    pb.n_ctx[i] = r.pos + 1;
    pb.max_ctx = std::max(pb.max_ctx, r.pos + 1);
  }
  // CSR over the distinct sequences, in order of first appearance; built after the appends so
  // every row sees its sequence's final page table for this batch.
  std::unordered_map<int, int> index_of;
  pb.indptr.push_back(0);
  for (int i = 0; i < n; ++i) {
    const int seq = batch.rows[i].slot;
    auto [it, fresh] = index_of.try_emplace(seq, static_cast<int>(pb.last_page_len.size()));
    if (fresh) {
      const std::vector<int>& pages = blocks.page_table(seq);
      pb.indices.insert(pb.indices.end(), pages.begin(), pages.end());
      pb.indptr.push_back(static_cast<int>(pb.indices.size()));
      const int bs = blocks.pool().block_size();
      const int len = blocks.length(seq);
      pb.last_page_len.push_back(len == 0 ? 0 : (len - 1) % bs + 1);
    }
    pb.row_seq[i] = it->second;
  }
  return pb;
}

}  // namespace kvheap::ch03
