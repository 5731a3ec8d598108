// The KV budget of a paged run (chapters 3-5): the pool's flags and the blocks a budget holds.
// holds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/program/cli.hpp"
#include "common/model/model_config.hpp"

namespace kvheap {

/// \brief The pool's flags.
struct PoolOptions {
  int block_size = 16;             ///< --block-size: token slots per block
  std::uint64_t shuffle_seed = 1;  ///< --shuffle-seed: order of the free list (0: in order)
};

/// \brief Registers --block-size and --shuffle-seed on `cli`.
void add_pool_options(CommandLine& cli, PoolOptions& p);

/// \brief Blocks needed for a budget: budget / (block_size x kv_bytes_per_token); throws
/// UsageError for a block size below 1, and ResourceError naming both sizes when the budget
/// holds no block, or fewer blocks than one sequence of `min_tokens` needs.
int blocks_for_budget(const ModelConfig& c, DType kv, std::size_t budget_bytes, int block_size,
                      int min_tokens = 1);

/// \brief The pool of a run serving several sequences.
struct PoolSize {
  std::size_t budget_bytes = 0;  ///< the KV budget it was cut from
  int num_blocks = 0;            ///< blocks of the run's block size it holds
};

/// \brief Cuts `budget_cap` bytes into blocks, or, when it is 0, what chapter 2 would reserve for
/// `num_sequences` sequences (max_seq_len each), so that the reports compare the policies on the
/// same memory. Throws ResourceError when the pool holds fewer blocks than a sequence of
/// `longest` positions needs; for the default budget the message says how to give a larger one.
PoolSize pool_for_run(const ModelConfig& c, DType kv, std::size_t budget_cap,
                      std::size_t num_sequences, int block_size, long longest);

struct Run;

/// \brief pool_for_run() for a chapter's run: its --kv-budget-mb, requests and longest request.
PoolSize pool_for_run(const Run& run, int block_size);

}  // namespace kvheap
