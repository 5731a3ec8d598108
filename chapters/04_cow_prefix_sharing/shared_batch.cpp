#include "chapters/04_cow_prefix_sharing/shared_batch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "common/error.hpp"

namespace kvheap::ch04 {

SharedBatch build_shared_batch(SharedBlockManager& blocks, const Batch& batch) {
  // Check every row and count the blocks first, so a batch that cannot run changes nothing.
  std::unordered_map<int, int> next;  // sequence -> the position its next row must write
  for (int i = 0; i < batch.size(); ++i) {
    const BatchRow& r = batch.rows[i];
    auto [it, fresh] = next.try_emplace(r.slot, 0);
    if (fresh) it->second = blocks.length(r.slot);  // InputError for a sequence not allocated
    if (r.pos != it->second)
      throw InputError(fmt::format(
          "batch row {} writes position {} of sequence {}, expected {}: a sharing cache only "
          "appends, because a position already held may be shared with other sequences",
          i, r.pos, r.slot, it->second));
    ++it->second;
  }
  // New blocks past each sequence's table, plus copies of shared last blocks. A shared last
  // block is copied for each sequence that appends to it, except that when every holder appends,
  // the last of them finds it unshared and writes in place.
  long need = 0;
  const int bs = blocks.pool().block_size();
  std::unordered_map<int, int> appenders;  // shared, partly filled last block -> its appenders
  for (const auto& [seq, end] : next) {
    const std::vector<int>& pages = blocks.page_table(seq);
    need += blocks.blocks_for(end) - static_cast<long>(pages.size());
    if (blocks.length(seq) % bs != 0 && blocks.pool().ref_count(pages.back()) > 1)
      ++appenders[pages.back()];
  }
  for (const auto& [block, n] : appenders) need += std::min(n, blocks.pool().ref_count(block) - 1);
  if (need > blocks.num_available())
    throw ResourceError(fmt::format(
        "block pool exhausted: the batch needs {} new or copied blocks of {} slots and {} of {} "
        "are free or only cached; no sequence was grown",
        need, bs, blocks.num_available(), blocks.pool().num_blocks()));

  SharedBatch sb;
  sb.pages.slot_mapping.resize(batch.size());
  for (int i = 0; i < batch.size(); ++i)
    sb.pages.slot_mapping[i] = blocks.append_slot(batch.rows[i].slot, batch.rows[i].token);
  sb.copies = blocks.take_copies();
  ch03::add_page_tables(
      sb.pages, batch, bs,
      [&](int seq) -> const std::vector<int>& { return blocks.page_table(seq); },
      [&](int seq) { return blocks.length(seq); });
  return sb;
}

}  // namespace kvheap::ch04
