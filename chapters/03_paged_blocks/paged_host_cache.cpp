#include "chapters/03_paged_blocks/paged_host_cache.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace kvheap::ch03 {

int blocks_for_budget(const ModelConfig& c, DType kv, std::size_t budget_bytes, int block_size,
                      int min_tokens) {
  if (block_size <= 0)
    throw UsageError(fmt::format("--block-size must be positive, got {}", block_size));
  const std::size_t per_block = kv_bytes_per_token(c, kv) * static_cast<std::size_t>(block_size);
  const std::size_t blocks = budget_bytes / per_block;
  const std::size_t need = (static_cast<std::size_t>(min_tokens) + block_size - 1) / block_size;
  if (blocks < need || blocks == 0)
    throw ResourceError(fmt::format(
        "KV budget of {:.3f} MB holds {} blocks of {} tokens ({:.3f} MB each), fewer than the {} "
        "blocks one sequence of {} tokens needs",
        budget_bytes / 1e6, blocks, block_size, per_block / 1e6, need, min_tokens));
  if (blocks > (std::size_t{1} << 30))
    throw ResourceError(
        fmt::format("KV budget of {:.3f} MB means {} blocks; more than 2^30 is "
                    "not supported",
                    budget_bytes / 1e6, blocks));
  return static_cast<int>(blocks);
}

PoolSize pool_for_run(const ModelConfig& c, DType kv, std::size_t budget_cap,
                      std::size_t num_sequences, int block_size, long longest) {
  PoolSize pool;
  pool.budget_bytes =
      budget_cap > 0 ? budget_cap : num_sequences * kv_bytes_for_context(c, kv, c.max_seq_len);
  try {
    pool.num_blocks =
        blocks_for_budget(c, kv, pool.budget_bytes, block_size, static_cast<int>(longest));
  } catch (const ResourceError& e) {
    if (budget_cap > 0) throw;
    throw ResourceError(fmt::format(
        "{} (the default budget: max_seq_len = {} positions for each of the {} sequences); "
        "give a larger --kv-budget-mb or a smaller --block-size",
        e.what(), c.max_seq_len, num_sequences));
  }
  return pool;
}

PagedHostCache::PagedHostCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
                               std::uint64_t shuffle_seed)
    : bytes_per_token_(kv_bytes_per_token(config, kv)),
      blocks_(num_blocks, block_size, shuffle_seed),
      storage_(config, kv, num_blocks, block_size) {}

void PagedHostCache::prepare(const Batch& batch) { current_ = build_paged_batch(blocks_, batch); }

void PagedHostCache::write(int layer, const Batch& batch, const float* k, const float* v) {
  storage_.write(layer, batch, current_, k, v);
}

void PagedHostCache::attend(int layer, const Batch& batch, const float* q, float* out) {
  storage_.attend(layer, batch, current_, q, out);
}

std::size_t PagedHostCache::bytes_reserved() const {
  return blocks_.slots_held() * bytes_per_token_;
}

std::size_t PagedHostCache::bytes_used() const { return blocks_.tokens_held() * bytes_per_token_; }

}  // namespace kvheap::ch03
