// Chapter 1's policy: every admitted sequence reserves max_seq_len K and V rows per layer, in host
// memory, the moment it is admitted.
//
// This is what a first implementation does and what early serving systems did: simple, and
// wasteful, because most sequences end long before max_seq_len. The waste is the point of the
// chapter; bytes_reserved() vs bytes_used() measures it.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "common/cache/kv_cache.hpp"
#include "common/model/model_config.hpp"

namespace kvheap::ch01 {

/// \brief The naive cache: one contiguous [n_layers, max_seq_len, kv_dim] reservation per slot,
/// for K and for V, in host memory.
class ReservedCache final : public KVCache {
 public:
  /// \brief `budget_bytes` caps the total reservation (0 = no cap); `kv` is the storage dtype.
  ReservedCache(const ModelConfig& config, DType kv, std::size_t budget_bytes = 0);
  ~ReservedCache() override;

  /// \brief Bytes one admission reserves: max_seq_len x kv_bytes_per_token.
  [[nodiscard]] std::size_t reservation_bytes() const;
  /// \brief True when the budget holds one more reservation.
  [[nodiscard]] bool can_admit() const;
  /// \brief Reserves a slot; throws ResourceError naming the budget when it cannot.
  int admit();
  /// \brief Returns the slot's reservation.
  void release(int slot);
  /// \brief Tokens cached for `slot` (highest position written + 1).
  [[nodiscard]] int length(int slot) const;
  /// \brief Slots admitted and not released.
  [[nodiscard]] int num_admitted() const;

  void prepare(const Batch& batch) override;
  void write(int layer, const Batch& batch, const float* k, const float* v) override;
  void attend(int layer, const Batch& batch, const float* q, float* out) override;
  [[nodiscard]] std::size_t bytes_reserved() const override;
  [[nodiscard]] std::size_t bytes_used() const override;
  /// \brief Positions the last batch's rows attend to: pos + 1 each.
  [[nodiscard]] long positions_read() const override { return positions_read_; }

 private:
  struct Reservation;
  Reservation& slot_at(int slot) const;

  ModelConfig config_;
  DType kv_;
  std::size_t budget_;
  std::vector<std::unique_ptr<Reservation>> slots_;  // null = free slot id
  long positions_read_ = 0;                          // of the last prepared batch
};

}  // namespace kvheap::ch01
