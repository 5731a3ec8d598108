#include "common/program/kv_budget.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "common/forward/backend.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/program/chapter.hpp"

namespace kvheap {

void add_pool_options(CommandLine& cli, PoolOptions& p) {
  cli.option("--block-size", p.block_size, "Token slots per block").show_default();
  cli.option("--shuffle-seed", p.shuffle_seed,
             "Order of the free list; 0 hands out blocks in order")
      .show_default();
}

int blocks_for_budget(const ModelConfig& c, DType kv, std::size_t budget_bytes, int block_size,
                      int min_tokens) {
  if (block_size <= 0)
    throw UsageError(fmt::format("--block-size must be positive, got {}", block_size));
  const std::size_t per_block = kv_bytes_per_token(c, kv) * static_cast<std::size_t>(block_size);
  const std::size_t blocks = budget_bytes / per_block;
  const std::size_t need = (static_cast<std::size_t>(min_tokens) + block_size - 1) / block_size;
  if (blocks == 0)
    throw ResourceError(
        fmt::format("KV budget of {:.6g} MB does not hold one block of {} tokens ({:.6g} MB)",
                    budget_bytes / 1e6, block_size, per_block / 1e6));
  if (blocks < need)
    throw ResourceError(fmt::format(
        "KV budget of {:.6g} MB holds {} blocks of {} tokens ({:.6g} MB each), fewer than the {} "
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
  // A block longer than any sequence can be strands most of itself in every sequence, and the
  // per-block figures of a report would be fractions of one block.
  if (block_size > c.max_seq_len)
    throw UsageError(fmt::format(
        "--block-size {} is more than the model's max_seq_len of {} positions; expected a block "
        "size from 1 to {}",
        block_size, c.max_seq_len, c.max_seq_len));
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

PoolSize pool_for_run(const Run& run, int block_size) {
  const PoolSize pool = pool_for_run(run.config, run.kv, run.budget_cap, run.requests.size(),
                                     block_size, run.longest);
  // Before the block manager's tables are built for it (make_storage checks again, for chapter
  // 2's pools; a device pool is checked against the device's free memory there).
  if (run.backend.memory() == Memory::kHost)
    require_host_memory(
        static_cast<std::size_t>(pool.num_blocks) * block_size *
            kv_bytes_per_token(run.config, run.kv),
        fmt::format("KV pool of {} blocks x {} tokens", pool.num_blocks, block_size));
  return pool;
}

}  // namespace kvheap
