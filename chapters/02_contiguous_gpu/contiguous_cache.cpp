// The contiguous reservation in device memory: metadata per batch, KV write and decode attention.
#include "chapters/02_contiguous_gpu/contiguous_cache.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#include "kernels/decode_attention.hpp"
#include "kernels/kv_write.hpp"

namespace kvheap::ch02 {

/// Device storage: the reservation itself and the per-batch arrays the kernels read.
struct ContiguousGpuCache::Device {
  DeviceBuffer<unsigned char> k;  // [n_layers, max_slots, max_seq_len, kv_dim] in the KV dtype
  DeviceBuffer<unsigned char> v;  // same
  DeviceBuffer<std::int64_t> dst_rows;  // [rows] cache row (within a layer) each batch row writes
  DeviceBuffer<std::int64_t> base_row;  // [rows] cache row of position 0 of each row's sequence
  DeviceBuffer<int> n_ctx;              // [rows] positions each row attends: pos + 1
  cuda::AttentionWorkspace workspace;
};

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

int ContiguousGpuCache::slots_for_budget(const ModelConfig& config, DType kv,
                                         std::size_t budget_bytes) {
  const std::size_t per_slot = reservation_bytes(config, kv);
  if (budget_bytes < per_slot)
    throw ResourceError(fmt::format(
        "KV budget of {:.3f} MB cannot hold even one sequence: reserving max_seq_len = {} tokens "
        "at {} bytes/token needs {:.3f} MB",
        budget_bytes / 1e6, config.max_seq_len, kv_bytes_per_token(config, kv), per_slot / 1e6));
  return static_cast<int>(std::min<std::size_t>(budget_bytes / per_slot, 1 << 20));
}

ContiguousGpuCache::ContiguousGpuCache(const ModelConfig& config, DType kv, int max_slots)
    : config_(config),
      kv_(kv),
      max_slots_(max_slots),
      length_(checked_slots(max_slots), -1),
      dev_(std::make_unique<Device>()) {
  const std::size_t total = reservation_bytes(config, kv) * static_cast<std::size_t>(max_slots);
  require_free_device_memory(total, fmt::format("KV reservation of {} slots x {:.3f} MB", max_slots,
                                                reservation_bytes(config, kv) / 1e6));
  dev_->k = DeviceBuffer<unsigned char>(total / 2);
  dev_->v = DeviceBuffer<unsigned char>(total / 2);
  // Zeroed so that a kernel reading past a sequence's length sees zeros, not stale keys.
  dev_->k.fill_bytes(0);
  dev_->v.fill_bytes(0);
}

ContiguousGpuCache::~ContiguousGpuCache() = default;

bool ContiguousGpuCache::can_admit() const {
  return std::find(length_.begin(), length_.end(), -1) != length_.end();
}

int ContiguousGpuCache::admit() {
  const auto it = std::find(length_.begin(), length_.end(), -1);
  if (it == length_.end())
    throw ResourceError(fmt::format("all {} reserved KV slots are in use ({:.3f} MB each)",
                                    max_slots_, reservation_bytes(config_, kv_) / 1e6));
  *it = 0;
  return static_cast<int>(it - length_.begin());
}

void ContiguousGpuCache::release(int slot) {
  (void)length(slot);  // validates
  length_[slot] = -1;
}

int ContiguousGpuCache::length(int slot) const {
  if (slot < 0 || slot >= max_slots_ || length_[slot] < 0)
    throw InputError(fmt::format("KV slot {} is not admitted", slot));
  return length_[slot];
}

void ContiguousGpuCache::prepare(const Batch& batch) {
  // Checked first, and the members change only once the batch is known good, so a caller that
  // catches the error still holds the previous batch's consistent state: a row past a slot's next
  // position would attend to a gap holding zeros or an earlier occupant's keys, and two rows
  // writing one position would race in kv_write.
  const auto lengths = lengths_after(batch, [this](int slot) { return length(slot); });
  const int rows = batch.size();
  int max_ctx = 0;
  std::vector<std::int64_t> dst(rows), base(rows);
  std::vector<int> ctx(rows);
  for (int i = 0; i < rows; ++i) {
    const BatchRow& r = batch.rows[i];
    base[i] = static_cast<std::int64_t>(r.slot) * config_.max_seq_len;
    dst[i] = base[i] + r.pos;
    ctx[i] = r.pos + 1;
    max_ctx = std::max(max_ctx, ctx[i]);
  }
  if (dev_->n_ctx.size() < static_cast<std::size_t>(rows)) {
    dev_->dst_rows = DeviceBuffer<std::int64_t>(rows);
    dev_->base_row = DeviceBuffer<std::int64_t>(rows);
    dev_->n_ctx = DeviceBuffer<int>(rows);
  }
  dev_->dst_rows.upload(dst);
  dev_->base_row.upload(base);
  dev_->n_ctx.upload(ctx);
  rows_ = rows;
  max_ctx_ = max_ctx;
  for (const auto& [slot, len] : lengths) length_[slot] = len;
}

namespace {
// Byte offset of `layer` in a [n_layers, max_slots, max_seq_len, kv_dim] array.
std::size_t layer_offset(const ModelConfig& c, DType kv, int slots, int layer) {
  return static_cast<std::size_t>(layer) * slots * c.max_seq_len * c.kv_dim() * dtype_size(kv);
}
}  // namespace

void ContiguousGpuCache::write(int layer, const float* k, const float* v) {
  const std::size_t off = layer_offset(config_, kv_, max_slots_, layer);
  cuda::kv_write(kv_, dev_->k.data() + off, dev_->v.data() + off, k, v, dev_->dst_rows.data(),
                 rows_, config_.kv_dim(), nullptr);
}

void ContiguousGpuCache::attend(int layer, const float* q, float* out) {
  const std::size_t off = layer_offset(config_, kv_, max_slots_, layer);
  cuda::AttentionShape shape;
  shape.n = rows_;
  shape.n_heads = config_.n_heads;
  shape.n_kv_heads = config_.n_kv_heads;
  shape.head_dim = config_.head_dim;
  shape.max_n_ctx = max_ctx_;
  cuda::decode_attention(kv_, q, dev_->k.data() + off, dev_->v.data() + off, dev_->n_ctx.data(),
                         dev_->base_row.data(), shape, out, dev_->workspace, nullptr);
}

std::size_t ContiguousGpuCache::bytes_reserved() const {
  return reservation_bytes(config_, kv_) * static_cast<std::size_t>(max_slots_);
}

std::size_t ContiguousGpuCache::bytes_used() const {
  std::size_t n = 0;
  for (int len : length_) n += len > 0 ? kv_bytes_for_context(config_, kv_, len) : 0;
  return n;
}

}  // namespace kvheap::ch02
