// Reports on a block pool in the spirit of malloc statistics (pool_map.hpp draws it).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <iosfwd>
#include <string>

#include "chapters/03_paged_blocks/block_manager.hpp"
#include "common/model/model_config.hpp"

namespace kvheap::ch03 {

/// \brief A snapshot of the pool: what it holds, what that costs, and what a max_seq_len
/// reservation (chapters 1 and 2) would have cost for the same sequences.
struct PoolStats {
  int blocks_total = 0;               ///< blocks in the pool
  int blocks_used = 0;                ///< blocks owned by a page table
  int blocks_free = 0;                ///< blocks on the free list
  int block_size = 0;                 ///< slots per block
  int sequences = 0;                  ///< live sequences
  int largest_page_table = 0;         ///< blocks of the longest sequence
  std::size_t tokens = 0;             ///< positions holding a token
  std::size_t slots_held = 0;         ///< slots of used blocks
  std::size_t bytes_per_token = 0;    ///< KV bytes of one position, all layers
  std::size_t reservation_slots = 0;  ///< what max_seq_len per sequence would reserve

  /// \brief Unused slots in the sequences' last blocks, as a fraction of the slots held.
  [[nodiscard]] double tail_waste() const;
  /// \brief Waste of the max_seq_len reservation for the same sequences.
  [[nodiscard]] double reservation_waste() const;
};

/// \brief Takes a snapshot of `m` for a model whose sequences could reach `max_seq_len`.
PoolStats pool_stats(const BlockManager& m, const ModelConfig& c, DType kv);

/// \brief Prints the malloc_stats-style report.
void print_pool_stats(const PoolStats& s, std::ostream& os);

/// \brief The report as JSON (the "pool" object of --json).
nlohmann::json pool_stats_json(const PoolStats& s);

}  // namespace kvheap::ch03
