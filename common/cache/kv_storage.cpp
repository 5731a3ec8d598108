#include "common/cache/kv_storage.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "base/error.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/util/host_buffer.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "kernels/kv_types.hpp"
#include "kernels/kv_write.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/shared_prefix_attention_cpu.hpp"

namespace kvheap {

void add_page_tables(KVView& view, const Batch& batch, int block_size,
                     const std::function<const std::vector<int>&(int)>& pages_of,
                     const std::function<int(int)>& length_of) {
  const int n = batch.size();
  view.paged = true;
  view.block_size = block_size;
  view.row_seq.resize(n);
  view.n_ctx.resize(n);
  view.max_ctx = 0;
  for (int i = 0; i < n; ++i) {
    view.n_ctx[i] = batch.rows[i].pos + 1;
    view.max_ctx = std::max(view.max_ctx, view.n_ctx[i]);
  }
  // CSR over the distinct sequences, in order of first appearance.
  std::unordered_map<int, int> index_of;
  view.indptr.assign(1, 0);
  view.indices.clear();
  view.last_page_len.clear();
  for (int i = 0; i < n; ++i) {
    const int seq = batch.rows[i].seq;
    auto [it, fresh] = index_of.try_emplace(seq, static_cast<int>(view.last_page_len.size()));
    if (fresh) {
      const std::vector<int>& pages = pages_of(seq);
      view.indices.insert(view.indices.end(), pages.begin(), pages.end());
      view.indptr.push_back(static_cast<int>(view.indices.size()));
      const int len = length_of(seq);
      view.last_page_len.push_back(len == 0 ? 0 : (len - 1) % block_size + 1);
    }
    view.row_seq[i] = it->second;
  }
}

KVStorage::KVStorage(const ModelConfig& config, DType kv, std::int64_t num_slots)
    : config_(config), kv_(kv), num_slots_(num_slots) {
  if (num_slots <= 0)
    throw UsageError(fmt::format("a KV storage needs at least one slot, got {}", num_slots));
}

std::size_t KVStorage::bytes() const {
  return 2 * static_cast<std::size_t>(config_.n_layers) * static_cast<std::size_t>(num_slots_) *
         config_.kv_dim() * dtype_size(kv_);
}

void KVStorage::check_slots(std::int64_t first, int count, const char* what) const {
  if (first < 0 || count < 0 || first + count > num_slots_)
    throw std::logic_error(fmt::format("{}: slots [{}, {}) outside the storage's {} slots", what,
                                       first, first + count, num_slots_));
}

namespace {

/// The host storage: HostBuffers read by the CPU twins (kernels/*_cpu.hpp).
class HostKVStorage final : public KVStorage {
 public:
  HostKVStorage(const ModelConfig& config, DType kv, std::int64_t num_slots)
      : KVStorage(config, kv, num_slots), k_(bytes() / 2), v_(bytes() / 2) {}

  void load(KVView view) override { view_ = std::move(view); }

  void write(int layer, const float* k, const float* v) override {
    cpu::kv_write(kv_, layer_at(k_, layer), layer_at(v_, layer), k, v, view_.slot_mapping.data(),
                  view_.rows(), config_.kv_dim());
  }

  void attend(int layer, const float* q, float* out) override {
    const long kv_dim = config_.kv_dim();
    const cpu::AttendShape shape{config_.n_kv_heads, config_.group_size(), config_.head_dim};
    const auto n_ctx_of = [&](int i) { return view_.n_ctx[i]; };
    cpu::with_kv_type(kv_, [&](auto tag) {
      using T = decltype(tag);
      const T* kd = static_cast<const T*>(layer_at(k_, layer));
      const T* vd = static_cast<const T*>(layer_at(v_, layer));
      if (!view_.paged) {
        const auto rows_of = [&](int i) {
          const long base = view_.first_slot[i] * kv_dim;
          return cpu::ContiguousRows<T>{kd + base, vd + base, kv_dim};
        };
        cpu::attend_batch<T>(shape, view_.rows(), rows_of, n_ctx_of, q, out);
        return;
      }
      const auto rows_of = [&](int i) {
        const int* pages = view_.indices.data() + view_.indptr[view_.row_seq[i]];
        return cpu::PagedRows<T>{kd, vd, pages, view_.block_size, kv_dim};
      };
      if (view_.prefixes.groups() > 0)
        cpu::attend_batch_shared_prefix<T>(shape, view_.rows(), rows_of, n_ctx_of, view_.prefixes,
                                           q, out);
      else
        cpu::attend_batch<T>(shape, view_.rows(), rows_of, n_ctx_of, q, out);
    });
  }

  void copy_slots(std::int64_t src, std::int64_t dst, int count) override {
    check_slots(src, count, "copy_slots source");
    check_slots(dst, count, "copy_slots destination");
    const std::size_t slot_bytes = static_cast<std::size_t>(config_.kv_dim()) * dtype_size(kv_);
    for (HostBuffer* buf : {&k_, &v_})
      for (int l = 0; l < config_.n_layers; ++l) {
        auto* base = static_cast<unsigned char*>(layer_at(*buf, l));
        std::memcpy(base + dst * slot_bytes, base + src * slot_bytes, slot_bytes * count);
      }
  }

  [[nodiscard]] long positions_read() const override {
    return view_.prefixes.positions_read(view_.n_ctx);
  }
  [[nodiscard]] std::vector<long> shared_positions_read() const override {
    return view_.prefixes.positions_read_by_level();
  }

 private:
  // `layer`'s [num_slots, kv_dim] part of a K or V buffer.
  void* layer_at(HostBuffer& buf, int layer) const {
    return buf.data() + static_cast<std::size_t>(layer) * (bytes() / 2 / config_.n_layers);
  }

  HostBuffer k_;  // [n_layers, num_slots, kv_dim] in the KV dtype; huge pages (host_buffer.hpp)
  HostBuffer v_;  // same
  KVView view_;   // of the loaded batch
};

}  // namespace

std::unique_ptr<KVStorage> make_storage(Memory memory, const ModelConfig& config, DType kv,
                                        std::int64_t num_slots, const std::string& what) {
  if (memory == Memory::kDevice) return make_device_storage(config, kv, num_slots, what);
  // The buffers are written through at once (HostBuffer), so a pool past the memory the host has
  // left would not fail here: the kernel's out-of-memory killer would end the run. Refuse it.
  require_host_memory(static_cast<std::size_t>(num_slots) * kv_bytes_per_token(config, kv), what);
  return std::make_unique<HostKVStorage>(config, kv, num_slots);
}

}  // namespace kvheap
