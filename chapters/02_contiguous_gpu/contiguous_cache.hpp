// Chapter 2's policy: the max_seq_len reservation of chapter 1, made once, up front, as one
// contiguous array, the way a GPU server reserves its KV memory when it starts.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "common/cache/storage_cache.hpp"
#include "common/cache/kv_storage.hpp"
#include "common/model/model_config.hpp"

namespace kvheap::ch02 {

/// \brief Per layer, K and V are arrays [max_slots, max_seq_len, n_kv_heads, head_dim]; a slot is
/// one sequence's reservation. The whole array is allocated when the cache is made, so the waste
/// is decided before the first request arrives. Written once for both memories: the storage
/// (host memory and the CPU twin, or device memory and cuda::decode_attention) holds the bytes.
class ContiguousCache final : public StorageCache {
 public:
  /// \brief Reserves `max_slots` sequences of max_seq_len tokens in dtype `kv` in `memory`.
  /// Throws UsageError for fewer than one slot, and ResourceError when the memory cannot hold
  /// them.
  ContiguousCache(const ModelConfig& config, DType kv, int max_slots, Memory memory);

  /// \brief Slots (sequences) that fit `budget_bytes` under max_seq_len reservation; throws
  /// ResourceError naming both sizes when not even one does.
  static int slots_for_budget(const ModelConfig& config, DType kv, std::size_t budget_bytes);

  /// \brief True when a slot is free.
  [[nodiscard]] bool can_admit() const;
  /// \brief Takes a free slot; throws ResourceError when all are taken.
  int admit();
  /// \brief Frees `slot` (its bytes stay reserved: that is the policy).
  void release(int slot);
  /// \brief Tokens cached for `slot`.
  [[nodiscard]] int length(int slot) const;
  /// \brief Slots admitted and not released.
  [[nodiscard]] int num_admitted() const;

  /// \brief Every slot's reservation, admitted or not: the array allocated up front.
  [[nodiscard]] std::size_t bytes_reserved() const override;
  [[nodiscard]] std::size_t bytes_used() const override;

 private:
  /// \brief Checks the rows' positions and grows the slots' lengths: position t of a row of
  /// slot s is slot s x max_seq_len + t of the array. Throws InputError, changing nothing, for a
  /// row that does not continue its sequence.
  KVView view_for(const Batch& batch) override;

  ModelConfig config_;
  DType kv_;
  std::vector<int> length_;  // [max_slots]; -1 = free slot
};

}  // namespace kvheap::ch02
