#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <span>
#include <stdexcept>
#include <unordered_map>

#include "base/error.hpp"

namespace kvheap::ch04 {

SharedView shared_view(SharedBlockManager& blocks, const Batch& batch, bool read_once) {
  // Check every row and count the blocks first, so a batch that cannot run changes nothing.
  std::unordered_map<int, int> next;  // sequence -> the position its next row must write
  for (int i = 0; i < batch.size(); ++i) {
    const BatchRow& r = batch.rows[i];
    auto [it, fresh] = next.try_emplace(r.seq, 0);
    if (fresh) it->second = blocks.length(r.seq);  // InputError for a sequence not allocated
    if (r.pos != it->second)
      throw InputError(fmt::format(
          "batch row {} writes position {} of sequence {}, expected {}: a sharing cache only "
          "appends, because a position already held may be shared with other sequences",
          i, r.pos, r.seq, it->second));
    ++it->second;
  }
  // Each sequence's blocks to grow (new blocks, and a copy of a shared last block), except that
  // when every holder of a shared last block appends to it, the last of them finds it unshared
  // and writes in place: one copy fewer.
  long need = 0;
  const int bs = blocks.pool().block_size();
  std::unordered_map<int, int> appenders;  // shared, partly filled last block -> its appenders
  for (const auto& [seq, end] : next) {
    need += blocks.blocks_to_grow(seq, end - blocks.length(seq));
    const std::vector<int>& pages = blocks.page_table(seq);
    if (blocks.length(seq) % bs != 0 && blocks.pool().ref_count(pages.back()) > 1)
      ++appenders[pages.back()];
  }
  for (const auto& [block, n] : appenders)
    if (n >= blocks.pool().ref_count(block)) --need;
  if (need > blocks.num_available())
    throw ResourceError(fmt::format(
        "block pool exhausted: the batch needs {} block{} of {} slots (new, or copies of shared "
        "ones) and {} of {} are free or only cached; no sequence was grown",
        need, need == 1 ? "" : "s", bs, blocks.num_available(), blocks.pool().num_blocks()));

  SharedView sv;
  sv.view.slot_mapping.resize(batch.size());
  for (int i = 0; i < batch.size(); ++i)
    sv.view.slot_mapping[i] = blocks.append_slot(batch.rows[i].seq, batch.rows[i].token);
  sv.copies = blocks.take_copies();
  add_page_tables(
      sv.view, batch, bs,
      [&](int seq) -> const std::vector<int>& { return blocks.page_table(seq); },
      [&](int seq) { return blocks.length(seq); });
  if (read_once) sv.view.prefixes = plan_shared_prefixes(sv.view, bs);
  return sv;
}

namespace {

/// Adds to `plan` the groups among `rows`, which all hold the same physical blocks [0, from):
/// rows whose tables go on with the same block at `from` share the run of blocks all their tables
/// have from there (cut to the whole blocks their shortest row attends to), if two sequences or
/// more hold it; then, recursively, each such group's next level. Parents come before children.
void add_levels(const KVView& view, int block_size, const std::vector<int>& rows, int from,
                SharedPrefixPlan& plan) {
  auto table = [&](int i) {
    const int s = view.row_seq[i];
    return std::span<const int>(view.indices.data() + view.indptr[s],
                                view.indices.data() + view.indptr[s + 1]);
  };
  // Rows by their block at `from`, in order of first appearance; a row whose table or context
  // ends there goes no deeper.
  std::map<int, std::vector<int>> by_next;
  std::vector<int> order;
  for (int i : rows) {
    const auto pt = table(i);
    if (static_cast<int>(pt.size()) <= from || view.n_ctx[i] / block_size <= from) continue;
    auto [it, fresh] = by_next.try_emplace(pt[from]);
    if (fresh) order.push_back(pt[from]);
    it->second.push_back(i);
  }
  for (int next : order) {
    const std::vector<int>& members = by_next[next];
    const auto lead = table(members[0]);
    long blocks = static_cast<long>(lead.size());
    bool several = false;
    for (int i : members) {
      const auto pt = table(i);
      several |= view.row_seq[i] != view.row_seq[members[0]];
      const auto diff = std::mismatch(lead.begin() + from, lead.end(), pt.begin() + from, pt.end());
      blocks = std::min<long>(blocks, diff.first - lead.begin());
      blocks = std::min<long>(blocks, view.n_ctx[i] / block_size);
    }
    if (!several) continue;  // blocks > from: every member holds block `next` at `from`
    plan.rows.insert(plan.rows.end(), members.begin(), members.end());
    plan.indptr.push_back(static_cast<int>(plan.rows.size()));
    plan.prefix_begin.push_back(from * block_size);
    plan.prefix_len.push_back(static_cast<int>((blocks - from) * block_size));
    add_levels(view, block_size, members, static_cast<int>(blocks), plan);
  }
}

}  // namespace

SharedPrefixPlan plan_shared_prefixes(const KVView& view, int block_size) {
  std::vector<int> rows(view.row_seq.size());
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int>(i);
  SharedPrefixPlan plan;
  add_levels(view, block_size, rows, 0, plan);
  return plan;
}

SharedCache::SharedCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
                         std::uint64_t shuffle_seed, bool read_once, Memory memory)
    : StorageCache(
          make_storage(memory, config, kv, std::int64_t{num_blocks} * block_size,
                       fmt::format("KV pool of {} blocks x {} tokens", num_blocks, block_size))),
      bytes_per_token_(kv_bytes_per_token(config, kv)),
      read_once_(read_once),
      blocks_(num_blocks, block_size, shuffle_seed) {}

void SharedCache::price_groups(const AttentionDims& dims, AttentionRates rates) {
  if (!read_once_)
    throw std::logic_error("price_groups: a cache that never reads once has no groups to price");
  dims_ = dims;
  rates_ = std::move(rates);
}

KVView SharedCache::view_for(const Batch& batch) {
  SharedView sv = shared_view(blocks_, batch, read_once_);
  groups_planned_ += sv.view.prefixes.groups();
  if (prices_groups()) sv.view.prefixes = choose_read_once(sv.view.prefixes, dims_, rates_).plan;
  groups_read_once_ += sv.view.prefixes.groups();
  const std::int64_t bs = blocks_.pool().block_size();
  for (const BlockCopy& c : sv.copies) copy_slots(c.src * bs, c.dst * bs, c.slots);
  return std::move(sv.view);
}

std::size_t SharedCache::bytes_reserved() const {
  return blocks_.slots_in_use() * bytes_per_token_;
}

std::size_t SharedCache::bytes_used() const { return blocks_.slots_stored() * bytes_per_token_; }

ReadOnce parse_read_once(const std::string& name) {
  if (name == "where-it-pays") return ReadOnce::kWherePays;
  if (name == "always") return ReadOnce::kAlways;
  if (name == "never") return ReadOnce::kNever;
  throw UsageError(fmt::format(
      "--read-once {}: expected where-it-pays (each shared prefix read once where the cost model "
      "says it pays), always or never",
      name));
}

void ReadOnceFlags::add(CommandLine& cli) {
  Flag choice = cli.option(
      "--read-once", mode,
      "Where rows that share a prefix read it once per step for all of them: where-it-pays "
      "(each group whose price, from the read peak and the attention loops' rates measured in "
      "this run, says it saves time; always on a GPU or with --no-peak), always, or never");
  choice.show_default();
  cli.flag("--no-read-once", never,
           "Every row reads its whole context, shared prefixes included (chapter 3's attention): "
           "--read-once never")
      .excludes(choice);
}

std::unique_ptr<SharedCache> make_shared_cache(const Run& run, const PoolOptions& pool,
                                               ReadOnce read_once, PoolSize& size) {
  size = pool_for_run(run, pool.block_size);
  auto cache = std::make_unique<SharedCache>(run.config, run.kv, size.num_blocks, pool.block_size,
                                             pool.shuffle_seed, read_once != ReadOnce::kNever,
                                             run.backend.memory());
  const auto& peak = run.backend.peak();
  if (read_once == ReadOnce::kWherePays && run.backend.memory() == Memory::kHost && peak.gbps > 0)
    cache->price_groups(
        attention_dims(run.config, run.kv),
        cpu_attention_rates(run.config, run.kv, peak.gbps, static_cast<double>(peak.cache_bytes)));
  return cache;
}

}  // namespace kvheap::ch04
