#include "chapters/02_contiguous_gpu/contiguous_cache.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.hpp"

namespace kvheap::ch02 {

namespace {
std::size_t reservation_bytes(const ModelConfig& c, DType kv) {
  return kv_bytes_for_context(c, kv, c.max_seq_len);
}
// Checked before the members that are sized by it are built.
int checked_slots(int max_slots) {
  if (max_slots <= 0) throw UsageError(fmt::format("need at least one slot, got {}", max_slots));
  return max_slots;
}
}  // namespace

int ContiguousCache::slots_for_budget(const ModelConfig& config, DType kv,
                                      std::size_t budget_bytes) {
  const std::size_t per_slot = reservation_bytes(config, kv);
  if (budget_bytes < per_slot)
    throw ResourceError(fmt::format(
        "KV budget of {:.3f} MB cannot hold even one sequence: reserving max_seq_len = {} tokens "
        "at {} bytes/token needs {:.3f} MB",
        budget_bytes / 1e6, config.max_seq_len, kv_bytes_per_token(config, kv), per_slot / 1e6));
  return static_cast<int>(std::min<std::size_t>(budget_bytes / per_slot, 1 << 20));
}

ContiguousCache::ContiguousCache(const ModelConfig& config, DType kv, int max_slots, Memory memory)
    : StorageCache(make_storage(memory, config, kv,
                                std::int64_t{checked_slots(max_slots)} * config.max_seq_len,
                                fmt::format("KV reservation of {} slots x {:.3f} MB", max_slots,
                                            reservation_bytes(config, kv) / 1e6))),
      config_(config),
      kv_(kv),
      length_(max_slots, -1) {}

bool ContiguousCache::can_admit() const {
  return std::find(length_.begin(), length_.end(), -1) != length_.end();
}

int ContiguousCache::admit() {
  const auto it = std::find(length_.begin(), length_.end(), -1);
  if (it == length_.end())
    throw ResourceError(fmt::format("all {} reserved KV slots are in use ({:.3f} MB each)",
                                    length_.size(), reservation_bytes(config_, kv_) / 1e6));
  *it = 0;
  return static_cast<int>(it - length_.begin());
}

void ContiguousCache::release(int slot) {
  (void)length(slot);  // validates
  length_[slot] = -1;
}

int ContiguousCache::length(int slot) const {
  if (slot < 0 || slot >= static_cast<int>(length_.size()) || length_[slot] < 0)
    throw InputError(fmt::format("KV slot {} is not admitted", slot));
  return length_[slot];
}

int ContiguousCache::num_admitted() const {
  return static_cast<int>(
      std::count_if(length_.begin(), length_.end(), [](int n) { return n >= 0; }));
}

KVView ContiguousCache::view_for(const Batch& batch) {
  // Checked first, and the lengths change only once the batch is known good: a row past a slot's
  // next position would attend to a gap holding zeros or an earlier occupant's keys, and two rows
  // writing one position would race in kv_write.
  const auto lengths = lengths_after(batch, [this](int slot) { return length(slot); });
  KVView view;
  for (const BatchRow& r : batch.rows) {
    const std::int64_t first = static_cast<std::int64_t>(r.seq) * config_.max_seq_len;
    view.first_slot.push_back(first);
    view.slot_mapping.push_back(first + r.pos);
    view.n_ctx.push_back(r.pos + 1);
    view.max_ctx = std::max(view.max_ctx, r.pos + 1);
  }
  for (const auto& [slot, len] : lengths) length_[slot] = len;
  return view;
}

std::size_t ContiguousCache::bytes_reserved() const {
  return reservation_bytes(config_, kv_) * length_.size();
}

std::size_t ContiguousCache::bytes_used() const {
  std::size_t n = 0;
  for (int len : length_) n += len > 0 ? kv_bytes_for_context(config_, kv_, len) : 0;
  return n;
}

}  // namespace kvheap::ch02
