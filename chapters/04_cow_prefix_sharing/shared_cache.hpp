// Chapter 4's policy: reference-counted blocks with fork, copy-on-write and a prefix index, over
// a pool in host or device memory, with shared prefixes read once per step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chapters/04_cow_prefix_sharing/shared_block_manager.hpp"
#include "common/program/chapter.hpp"
#include "common/cache/storage_cache.hpp"
#include "common/cache/kv_storage.hpp"
#include "common/cache/read_once_cost.hpp"
#include "common/model/model_config.hpp"
#include "common/program/kv_budget.hpp"

namespace kvheap::ch04 {

/// \brief What a sharing cache hands its storage for one batch: the view (slot mapping, page
/// tables and the shared-prefix plan), and the copies-on-write to make before any row writes.
struct SharedView {
  KVView view;                    ///< as chapter 3 builds it, plus view.prefixes when reading once
  std::vector<BlockCopy> copies;  ///< to make, in order, before the batch's first write
};

/// \brief Groups the rows of `view` whose sequences hold the same physical blocks, level by level:
/// a tree of shared prefixes.
///
/// Rows are grouped by their sequence's first block; a group shares the run of blocks that all
/// its sequences' page tables begin with, cut to the whole blocks its shortest row attends to.
/// Within a group, rows whose tables go on with the same block form the next level the same way
/// (a document after a shared system prompt, then the questions about it), and so on. Only groups
/// of at least two sequences are kept; each shares at least one block.
SharedPrefixPlan plan_shared_prefixes(const KVView& view, int block_size);

/// \brief Appends every row's token to its sequence and builds the batch's view; with
/// `read_once`, rows that share a prefix are planned to read it once (plan_shared_prefixes).
///
/// Each row must write its sequence's next position, in order: a position a sequence holds may be
/// shared, so it is never rewritten here (InputError names the row). When the pool cannot supply
/// the new blocks and copies the batch needs, even by evicting cached blocks, it throws
/// ResourceError before any sequence grows.
SharedView shared_view(SharedBlockManager& blocks, const Batch& batch, bool read_once = true);

/// \brief When rows that share a prefix read it once per step (--read-once).
enum class ReadOnce {
  kNever,      ///< every row reads its whole context, as in chapter 3
  kAlways,     ///< every shared prefix, whatever it costs
  kWherePays,  ///< each group whose price says it pays (choose_read_once); always without rates
};

/// \brief Parses --read-once's value (where-it-pays, always or never); UsageError otherwise.
ReadOnce parse_read_once(const std::string& name);

/// \brief --read-once and --no-read-once, as chapters 4 and 5 take them.
struct ReadOnceFlags {
  std::string mode = "where-it-pays";  ///< --read-once
  bool never = false;                  ///< --no-read-once: --read-once never
  /// \brief Registers both flags on `cli` (refused together).
  void add(CommandLine& cli);
  /// \brief The choice the flags make; UsageError for an unknown --read-once value.
  [[nodiscard]] ReadOnce resolve() const {
    return never ? ReadOnce::kNever : parse_read_once(mode);
  }
};

/// \brief Reference-counted blocks with fork, copy-on-write and a prefix index; K and V in
/// [num_blocks, block_size, n_kv_heads, head_dim] arrays per layer, in host or device memory.
/// Sequences are SharedBlockManager ids (the batch's `slot` field).
class SharedCache final : public StorageCache {
 public:
  /// \brief A pool of `num_blocks` blocks of `block_size` slots in `memory` (shuffled when
  /// `shuffle_seed` is non-zero). With `read_once`, rows that share a prefix read it once per
  /// step for all of them; without, every row reads its whole context, as in chapter 3. Throws
  /// ResourceError when the memory cannot hold the pool.
  SharedCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
              std::uint64_t shuffle_seed, bool read_once, Memory memory);

  /// \brief True when rows that share a prefix read it once per step.
  [[nodiscard]] bool reads_once() const { return read_once_; }
  /// \brief Reads a group's prefix once only where choose_read_once says it pays, priced with
  /// `dims` and `rates` (a cache made with read_once only).
  void price_groups(const AttentionDims& dims, AttentionRates rates);
  /// \brief Whether groups are priced (price_groups).
  [[nodiscard]] bool prices_groups() const { return static_cast<bool>(rates_.flops_per_s); }
  /// \brief Groups the batches so far planned to share a prefix, and of those how many read it
  /// once (all of them unless priced).
  [[nodiscard]] long groups_planned() const { return groups_planned_; }
  /// \copydoc groups_planned()
  [[nodiscard]] long groups_read_once() const { return groups_read_once_; }
  /// \brief Seconds spent measuring the rates groups are priced with (0 unless priced).
  [[nodiscard]] double pricing_seconds() const { return rates_.setup_seconds; }
  /// \brief The allocator: admit, fork, grow and free sequences through it.
  SharedBlockManager& blocks() { return blocks_; }
  /// \copydoc blocks()
  [[nodiscard]] const SharedBlockManager& blocks() const { return blocks_; }

  /// \brief Every block in use, held by a sequence or only cached by the prefix index.
  [[nodiscard]] std::size_t bytes_reserved() const override;
  /// \brief Slots that hold a position, each shared slot once.
  [[nodiscard]] std::size_t bytes_used() const override;

 private:
  /// \brief Appends the batch's rows (shared_view) and makes the copies-on-write it asked for.
  /// With read_once, the view plans the shared prefixes, so positions_read() counts them once
  /// (once per slice of 16 query heads per KV head on a GPU).
  KVView view_for(const Batch& batch) override;

  std::size_t bytes_per_token_;
  bool read_once_;
  AttentionDims dims_;
  AttentionRates rates_;  // empty unless price_groups
  long groups_planned_ = 0, groups_read_once_ = 0;
  SharedBlockManager blocks_;
};

/// \brief The sharing cache of a chapter's run: a pool cut from its budget (pool_for_run) in blocks
/// of `pool.block_size`, in the backend's memory. `size` receives the pool's size.
///
/// ReadOnce::kWherePays prices groups on a CPU backend whose read peak was measured, with the
/// CPU attention loops' rates (CpuAttendRates, measured in this process on first use). A device
/// backend, or a run without the peak (--no-peak), reads every shared prefix once: the model has
/// no measured rates to price it with there.
std::unique_ptr<SharedCache> make_shared_cache(const Run& run, const PoolOptions& pool,
                                               ReadOnce read_once, PoolSize& size);

}  // namespace kvheap::ch04
