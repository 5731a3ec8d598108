// What a serving policy tells the loop and the report, as plain values: a snapshot after every
// forward pass (PolicySnapshot), and at the end what it did (PolicyStats), with a section for
// each chapter's idea. The policy only counts; policy_report.hpp prints.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace kvheap {

/// \brief KV memory a policy holds: for the requests it serves, by its own accounting.
struct KvUsage {
  std::size_t reserved = 0;  ///< bytes set aside (reservations, blocks held)
  std::size_t used = 0;      ///< bytes that hold a token's K and V
};

/// \brief The policy's KV memory at one step, by what holds it; the three add up to the pool (a
/// policy without one: to its budget, or to what it holds when it has no cap).
struct KvOccupancy {
  std::size_t held = 0;    ///< bytes held for running requests (reservations, their blocks)
  std::size_t cached = 0;  ///< bytes no request holds that a prefix index keeps for reuse
  std::size_t free = 0;    ///< bytes free
};

/// \brief The occupancy of a policy without a prefix index: `held` bytes held, the rest of
/// `budget` (0: no cap) free.
KvOccupancy held_of_budget(std::size_t held, std::size_t budget);

/// \brief The policy after a forward pass, before the pass's tokens are taken.
struct PolicySnapshot {
  int running = 0;          ///< requests holding memory
  KvUsage usage{};          ///< KV memory they hold
  KvOccupancy occupancy{};  ///< the pool by what holds it
};

/// \brief What a policy counts that the loop cannot see.
struct PolicyCounters {
  long preemptions = 0;       ///< times a running request gave its memory back
  long positions_reused = 0;  ///< prompt positions taken from a prefix index, not computed
};

/// \brief A block pool in the spirit of malloc statistics (chapter 3), taken when a batch ends,
/// with what a max_seq_len reservation (chapters 1 and 2) would have cost the same sequences.
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

/// \brief Chapter 3: the pool at the end of the largest batch, and how many sequences the budget
/// fits under each policy.
struct PagingStats {
  PoolStats pool{};           ///< when the last batch ended, before its blocks went back
  int num_blocks = 0;         ///< blocks cut from the budget
  int fit_contiguous = 0;     ///< sequences of a max_seq_len reservation the budget fits
  int fit_paged = 0;          ///< at this run's average blocks per sequence (0: nothing stored)
  double blocks_per_seq = 0;  ///< that average
};

/// \brief Chapter 4: what sharing saved in positions computed, blocks stored and bytes read.
struct SharingStats {
  int block_size = 0;                ///< token slots per block
  int blocks_total = 0;              ///< blocks cut from the budget
  long prompt_positions = 0;         ///< of the prefilled prompts
  long prompt_positions_reused = 0;  ///< of them taken from the prefix index
  long blocks_held = 0;              ///< at the end of the largest batch
  long blocks_referenced = 0;        ///< what unshared page tables would hold then
  long forks = 0;                    ///< sequences made by forking another
  long copies_on_write = 0;          ///< shared last blocks copied because a sequence wrote to them
  long evictions = 0;                ///< cached blocks given back to the pool to make room
  bool read_once = false;            ///< the attention reads a shared prefix once per step
  bool priced = false;         ///< read once only where a cost model says it pays (--read-once)
  long groups_planned = 0;     ///< groups of rows sharing a prefix, summed over the passes
  long groups_read_once = 0;   ///< of them, those that read it once (all unless priced)
  double pricing_seconds = 0;  ///< measuring the rates the cost model prices with, at start
};

/// \brief What the scheduler has done so far.
struct SchedulerCounters {
  long steps = 0;             ///< batches planned
  long admissions = 0;        ///< times a request got a sequence (again after preemption)
  long preemptions = 0;       ///< sequences freed to make room
  long decode_rows = 0;       ///< rows of requests with one row left (a sampled token, mostly)
  long prefill_rows = 0;      ///< prompt rows, and rows of a preempted request computed again
  long recomputed_rows = 0;   ///< prefill rows for positions a request had computed before
  long positions_reused = 0;  ///< positions taken from the prefix index at admission (prompts,
                              ///< and a preempted request's own blocks when it comes back)
  int peak_running = 0;       ///< most requests running in one step
};

/// \brief Chapter 5: what the scheduler did, and its limits.
struct SchedulerStats {
  SchedulerCounters counters{};  ///< what it did
  int max_batch_tokens = 0;      ///< rows a pass may hold
  int max_running = 0;           ///< requests that may run at once
  int block_size = 0;            ///< token slots per block
  int blocks_total = 0;          ///< blocks cut from the budget
};

/// \brief What a policy says of one request beyond the loop's record.
struct RequestStats {
  std::optional<int> prompt{};                ///< chapter 4: the index of its prompt
  std::optional<int> prompt_tokens_reused{};  ///< chapter 4: positions from the prefix index
  std::optional<long> preemptions{};          ///< chapter 5: times it gave its memory back
};

/// \brief What a policy did over a run, for the report.
struct PolicyStats {
  std::size_t budget_bytes = 0;  ///< the KV budget it works in (0: no cap)
  /// True when a pass may mix prompt and decode rows (continuous batching): the report then
  /// counts the whole run as decoding.
  bool mixed_passes = false;
  PolicyCounters counters{};                  ///< preemptions and prefix reuse
  std::optional<PagingStats> paging{};        ///< chapter 3's section
  std::optional<SharingStats> sharing{};      ///< chapter 4's
  std::optional<SchedulerStats> scheduler{};  ///< chapter 5's
  std::vector<RequestStats> requests{};       ///< by request id; may stop short
  RequestStats others{};                      ///< for the requests past the end of that list

  /// \brief What the policy says of request `id`.
  [[nodiscard]] const RequestStats& request(int id) const {
    return id >= 0 && id < static_cast<int>(requests.size()) ? requests[id] : others;
  }
};

}  // namespace kvheap
