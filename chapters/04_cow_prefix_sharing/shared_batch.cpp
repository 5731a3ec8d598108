#include "chapters/04_cow_prefix_sharing/shared_batch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <span>
#include <unordered_map>

#include "base/error.hpp"

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
        "block pool exhausted: the batch needs {} block{} of {} slots (new, or copies of shared "
        "ones) and {} of {} are free or only cached; no sequence was grown",
        need, need == 1 ? "" : "s", bs, blocks.num_available(), blocks.pool().num_blocks()));

  SharedBatch sb;
  sb.pages.slot_mapping.resize(batch.size());
  for (int i = 0; i < batch.size(); ++i)
    sb.pages.slot_mapping[i] = blocks.append_slot(batch.rows[i].slot, batch.rows[i].token);
  sb.copies = blocks.take_copies();
  ch03::add_page_tables(
      sb.pages, batch, bs,
      [&](int seq) -> const std::vector<int>& { return blocks.page_table(seq); },
      [&](int seq) { return blocks.length(seq); });
  sb.prefixes = plan_shared_prefixes(sb.pages, bs);
  return sb;
}

long positions_read(const SharedBatch& batch, bool read_once, int group, int heads_per_pass) {
  if (read_once) return batch.prefixes.positions_read(batch.pages.n_ctx, group, heads_per_pass);
  long total = 0;
  for (int c : batch.pages.n_ctx) total += c;
  return total;
}

SharedPrefixPlan plan_shared_prefixes(const ch03::PagedBatch& pages, int block_size) {
  const int n = static_cast<int>(pages.row_seq.size());
  auto table = [&](int s) {
    return std::span<const int>(pages.indices.data() + pages.indptr[s],
                                pages.indices.data() + pages.indptr[s + 1]);
  };
  // Candidate groups: rows by their sequence's first block, in order of first appearance.
  std::map<int, std::vector<int>> by_first;
  std::vector<int> order;
  for (int i = 0; i < n; ++i) {
    const auto pt = table(pages.row_seq[i]);
    if (pt.empty() || pages.n_ctx[i] < block_size) continue;
    auto [it, fresh] = by_first.try_emplace(pt.front());
    if (fresh) order.push_back(pt.front());
    it->second.push_back(i);
  }
  SharedPrefixPlan plan;
  for (int first : order) {
    const std::vector<int>& rows = by_first[first];
    const auto lead = table(pages.row_seq[rows[0]]);
    long blocks = static_cast<long>(lead.size());
    bool several = false;
    for (int i : rows) {
      const auto pt = table(pages.row_seq[i]);
      several |= pages.row_seq[i] != pages.row_seq[rows[0]];
      const auto diff = std::mismatch(lead.begin(), lead.end(), pt.begin(), pt.end());
      blocks = std::min<long>(blocks, diff.first - lead.begin());
      blocks = std::min<long>(blocks, pages.n_ctx[i] / block_size);
    }
    if (!several || blocks == 0) continue;
    plan.rows.insert(plan.rows.end(), rows.begin(), rows.end());
    plan.indptr.push_back(static_cast<int>(plan.rows.size()));
    plan.prefix_len.push_back(static_cast<int>(blocks * block_size));
  }
  return plan;
}

}  // namespace kvheap::ch04
