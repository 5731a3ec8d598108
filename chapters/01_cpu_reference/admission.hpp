// Admission under reservation (chapters 1 and 2): a request is admitted while a max_seq_len
// reservation fits, in static batches.
//
// Every admitted request takes a whole reservation, however short it turns out to be, and keeps
// it until its batch has finished; requests that find no reservation wait for the next batch.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/serving/static_batches.hpp"

namespace kvheap::ch01 {

/// \brief Admission for static batches over a reserving cache: `Cache` has can_admit(), admit(),
/// release(slot), length(slot) and num_admitted() (chapter 1's ReservedCache, chapter 2's
/// ContiguousCache).
template <class Cache>
class ReservationAdmission final : public BatchAdmission {
 public:
  /// \brief Serves over `cache`, which works in `budget_bytes` (0: no cap).
  ReservationAdmission(std::unique_ptr<Cache> cache, std::size_t budget_bytes)
      : cache_(std::move(cache)), budget_(budget_bytes) {}

  KVCache& cache() override { return *cache_; }
  [[nodiscard]] PolicyStats stats() const override { return {.budget_bytes = budget_}; }
  void check_drained() const override {
    if (cache_->num_admitted() != 0)
      throw std::logic_error("a reservation is still held after every request finished");
  }

  bool fits(int id, const Request&, int forks, std::string& why) override {
    if (forks > 0) throw std::logic_error("a reservation policy has no forks");
    if (!cache_->can_admit()) {
      why = "no reservation is free";
      return false;
    }
    slot_[id] = cache_->admit();
    return true;
  }
  int allocate(int id, const Request&) override { return slot_.at(id); }
  [[nodiscard]] int length(int seq) const override { return cache_->length(seq); }
  void release(const std::vector<int>& seqs, long) override {
    for (const int s : seqs) cache_->release(s);
    slot_.clear();
  }

 private:
  std::unique_ptr<Cache> cache_;
  std::size_t budget_;
  std::unordered_map<int, int> slot_;  // request id -> its reservation
};

}  // namespace kvheap::ch01
