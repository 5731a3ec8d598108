// The naive reservation policy and its attention (the CPU attention twin over contiguous rows).
#include "chapters/01_cpu_reference/reserved_cache.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/util/host_buffer.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "kernels/kv_write.hpp"

namespace kvheap::ch01 {

/// One sequence's reservation: K and V as raw bytes, [n_layers, max_seq_len, kv_dim] elements.
struct ReservedCache::Reservation {
  HostBuffer k;  // huge pages: see common/util/host_buffer.hpp
  HostBuffer v;
  int length = 0;
};

ReservedCache::ReservedCache(const ModelConfig& config, DType kv, std::size_t budget_bytes)
    : config_(config), kv_(kv), budget_(budget_bytes) {
  if (budget_ != 0 && budget_ < reservation_bytes())
    throw ResourceError(fmt::format(
        "KV budget of {:.3f} MB cannot hold even one sequence: reserving max_seq_len = {} tokens "
        "at {} bytes/token needs {:.3f} MB",
        budget_ / 1e6, config_.max_seq_len, kv_bytes_per_token(config_, kv_),
        reservation_bytes() / 1e6));
}

ReservedCache::~ReservedCache() = default;

std::size_t ReservedCache::reservation_bytes() const {
  return kv_bytes_for_context(config_, kv_, config_.max_seq_len);
}

bool ReservedCache::can_admit() const {
  return budget_ == 0 || bytes_reserved() + reservation_bytes() <= budget_;
}

int ReservedCache::admit() {
  if (!can_admit())
    throw ResourceError(fmt::format(
        "KV budget exhausted: {} sequences already reserve {:.3f} MB of the {:.3f} MB budget and "
        "one more needs {:.3f} MB",
        bytes_reserved() / reservation_bytes(), bytes_reserved() / 1e6, budget_ / 1e6,
        reservation_bytes() / 1e6));
  // Written through at once (HostBuffer): past what the host has left, the run would be killed.
  require_host_memory(
      reservation_bytes(),
      fmt::format("a KV reservation of max_seq_len = {} positions", config_.max_seq_len));
  auto r = std::make_unique<Reservation>();
  r->k = HostBuffer(reservation_bytes() / 2);
  r->v = HostBuffer(reservation_bytes() / 2);
  auto free_it = std::find(slots_.begin(), slots_.end(), nullptr);
  if (free_it != slots_.end()) {
    *free_it = std::move(r);
    return static_cast<int>(free_it - slots_.begin());
  }
  slots_.push_back(std::move(r));
  return static_cast<int>(slots_.size()) - 1;
}

ReservedCache::Reservation& ReservedCache::slot_at(int slot) const {
  if (slot < 0 || slot >= static_cast<int>(slots_.size()) || !slots_[slot])
    throw InputError(fmt::format("KV slot {} is not admitted", slot));
  return *slots_[slot];
}

void ReservedCache::release(int slot) {
  (void)slot_at(slot);  // validates the id
  slots_[slot].reset();
}

int ReservedCache::length(int slot) const { return slot_at(slot).length; }

void ReservedCache::prepare(const Batch& batch) {
  // The rows are checked before any length grows: a row past a slot's next position would attend
  // to a gap.
  for (const auto& [slot, len] : lengths_after(batch, [this](int s) { return length(s); }))
    slot_at(slot).length = len;
  positions_read_ = 0;
  for (const BatchRow& row : batch.rows) positions_read_ += row.pos + 1;
}

int ReservedCache::num_admitted() const {
  return static_cast<int>(
      std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return s != nullptr; }));
}

void ReservedCache::write(int layer, const Batch& batch, const float* k, const float* v) {
  const long kv_dim = config_.kv_dim();
  for (int i = 0; i < batch.size(); ++i) {
    const BatchRow& row = batch.rows[i];
    Reservation& r = slot_at(row.seq);
    // Row [layer][pos] of the slot's [n_layers, max_seq_len, kv_dim] reservation.
    const std::int64_t dst = static_cast<std::int64_t>(layer) * config_.max_seq_len + row.pos;
    cpu::kv_write(kv_, r.k.data(), r.v.data(), k + i * kv_dim, v + i * kv_dim, &dst, 1,
                  config_.kv_dim());
  }
}

void ReservedCache::attend(int layer, const Batch& batch, const float* q, float* out) {
  const long kv_dim = config_.kv_dim();
  for (const BatchRow& row : batch.rows) (void)slot_at(row.seq);  // throws here, not in a thread
  cpu::with_kv_type(kv_, [&](auto tag) {
    using T = decltype(tag);
    const long base = static_cast<long>(layer) * config_.max_seq_len * kv_dim;
    cpu::attend_batch<T>(
        cpu::AttendShape{config_.n_kv_heads, config_.group_size(), config_.head_dim}, batch.size(),
        [&](int i) {
          const Reservation& r = *slots_[batch.rows[i].seq];
          return cpu::ContiguousRows<T>{r.k.as<T>() + base, r.v.as<T>() + base, kv_dim};
        },
        [&](int i) { return batch.rows[i].pos + 1; }, q, out);
  });
}

std::size_t ReservedCache::bytes_reserved() const {
  std::size_t n = 0;
  for (const auto& s : slots_) n += s ? reservation_bytes() : 0;
  return n;
}

std::size_t ReservedCache::bytes_used() const {
  std::size_t n = 0;
  for (const auto& s : slots_) n += s ? kv_bytes_for_context(config_, kv_, s->length) : 0;
  return n;
}

}  // namespace kvheap::ch01
