// The device storage: K and V in device memory, the batch's view uploaded once per batch, and
// the CUDA kernels (kv_write, decode_attention, paged_attention, shared_prefix_attention).
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "base/error.hpp"
#include "common/kv_storage.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#include "kernels/decode_attention.hpp"
#include "kernels/kv_write.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/shared_prefix_attention.hpp"

namespace kvheap {
namespace {

// Grows `buf` to at least `count` elements; the contents are rewritten by the caller.
template <class T>
void ensure_size(DeviceBuffer<T>& buf, std::size_t count) {
  if (buf.size() >= count) return;
  buf.reset();  // free first: the old contents are about to be replaced
  buf = DeviceBuffer<T>(count);
}

class DeviceKVStorage final : public KVStorage {
 public:
  DeviceKVStorage(const ModelConfig& config, DType kv, std::int64_t num_slots,
                  const std::string& what)
      : KVStorage(config, kv, num_slots) {
    require_free_device_memory(bytes(), what);
    k_ = DeviceBuffer<unsigned char>(bytes() / 2);
    v_ = DeviceBuffer<unsigned char>(bytes() / 2);
    // Zeroed, so that a kernel reading a slot nobody wrote sees zeros, not garbage.
    k_.fill_bytes(0);
    v_.fill_bytes(0);
  }

  void load(KVView view) override;
  void write(int layer, const float* k, const float* v) override;
  void attend(int layer, const float* q, float* out) override;
  void copy_slots(std::int64_t src, std::int64_t dst, int count) override;

  [[nodiscard]] long positions_read() const override {
    // The kernel reads a prefix once per slice of at most gpu_heads_per_block query heads.
    return view_.prefixes.positions_read(view_.n_ctx, config_.group_size(),
                                         gpu_heads_per_block(config_.head_dim));
  }

 private:
  [[nodiscard]] std::size_t layer_bytes() const { return bytes() / 2 / config_.n_layers; }
  [[nodiscard]] cuda::AttentionShape shape() const {
    cuda::AttentionShape s;
    s.n = view_.rows();
    s.n_heads = config_.n_heads;
    s.n_kv_heads = config_.n_kv_heads;
    s.head_dim = config_.head_dim;
    s.max_n_ctx = view_.max_ctx;
    return s;
  }

  DeviceBuffer<unsigned char> k_;  // [n_layers, num_slots, kv_dim] in the KV dtype
  DeviceBuffer<unsigned char> v_;  // same
  // The view's arrays, packed so that a batch costs two host-to-device copies:
  //   ints:  [n_ctx (n) | indptr | indices | last_page_len | row_seq (n) | the prefix plan's]
  //   int64: [slot_mapping (n) | first_slot (n, contiguous only)]
  DeviceBuffer<int> ints_;
  DeviceBuffer<std::int64_t> slots_;
  KVView view_;  // host copy of the loaded view
  const int* n_ctx_ = nullptr;
  const std::int64_t* first_slot_ = nullptr;
  PagedLocator locator_;
  SharedPrefixView prefix_;
  DeviceBuffer<float> wide_q_;  // the prefix pass's gathered queries
  cuda::AttentionWorkspace workspace_, own_workspace_;
};

void DeviceKVStorage::load(KVView view) {
  view_ = std::move(view);
  const int n = view_.rows();
  std::vector<int> ints;
  std::vector<std::size_t> at;  // where each part starts
  const auto append = [&](const std::vector<int>& part) {
    at.push_back(ints.size());
    ints.insert(ints.end(), part.begin(), part.end());
  };
  append(view_.n_ctx);
  const bool shared = view_.paged && view_.prefixes.groups() > 0;
  if (view_.paged) {
    append(view_.indptr);
    append(view_.indices);
    append(view_.last_page_len);
    append(view_.row_seq);
  }
  std::optional<SharedPrefixArrays> plan;
  if (shared) {
    plan.emplace(view_.prefixes, view_.row_seq, view_.n_ctx);
    for (const std::vector<int>* part :
         {&plan->prefix_len, &plan->prefix_seq, &plan->group_rows, &plan->group_size, &plan->first,
          &plan->own_ctx, &plan->row_group, &plan->row_member})
      append(*part);
  }
  std::vector<std::int64_t> slots = view_.slot_mapping;
  if (!view_.paged) slots.insert(slots.end(), view_.first_slot.begin(), view_.first_slot.end());
  ensure_size(ints_, ints.size());
  ensure_size(slots_, slots.size());
  ints_.upload(ints);
  slots_.upload(slots);

  const int* base = ints_.data();
  n_ctx_ = base + at[0];
  first_slot_ = view_.paged ? nullptr : slots_.data() + n;
  if (view_.paged)
    locator_ =
        PagedLocator{base + at[1], base + at[2], base + at[3], base + at[4], view_.block_size};
  if (!shared) return;
  SharedPrefixView& v = prefix_;
  v.groups = view_.prefixes.groups();
  v.widest = plan->widest;
  v.max_prefix = *std::max_element(plan->prefix_len.begin(), plan->prefix_len.end());
  v.max_own = *std::max_element(plan->own_ctx.begin(), plan->own_ctx.end());
  v.prefix_len = base + at[5];
  v.prefix_seq = base + at[6];
  v.group_rows = base + at[7];
  v.group_size = base + at[8];
  v.first = base + at[9];
  v.own_ctx = base + at[10];
  v.row_group = base + at[11];
  v.row_member = base + at[12];
  ensure_size(wide_q_, cuda::shared_prefix_wide_q_floats(v.groups, v.widest, config_.n_heads,
                                                         config_.head_dim));
}

void DeviceKVStorage::write(int layer, const float* k, const float* v) {
  const std::size_t off = layer * layer_bytes();
  // The slot mapping is a row index into [num_slots, kv_dim]: exactly kv_write's dst_rows, so one
  // write kernel serves every layout.
  cuda::kv_write(kv_, k_.data() + off, v_.data() + off, k, v, slots_.data(), view_.rows(),
                 config_.kv_dim(), nullptr);
}

void DeviceKVStorage::attend(int layer, const float* q, float* out) {
  const std::size_t off = layer * layer_bytes();
  const void* kd = k_.data() + off;
  const void* vd = v_.data() + off;
  if (!view_.paged) {
    cuda::decode_attention(kv_, q, kd, vd, n_ctx_, first_slot_, shape(), out, workspace_, nullptr);
  } else if (view_.prefixes.groups() == 0) {
    cuda::paged_attention(kv_, q, kd, vd, n_ctx_, locator_, shape(), out, workspace_, nullptr);
  } else {
    cuda::shared_prefix_attention(kv_, q, kd, vd, locator_, prefix_, shape(), out, wide_q_.data(),
                                  workspace_, own_workspace_);
  }
}

void DeviceKVStorage::copy_slots(std::int64_t src, std::int64_t dst, int count) {
  check_slots(src, count, "copy_slots source");
  check_slots(dst, count, "copy_slots destination");
  const std::size_t slot_bytes = static_cast<std::size_t>(config_.kv_dim()) * dtype_size(kv_);
  for (DeviceBuffer<unsigned char>* buf : {&k_, &v_})
    for (int l = 0; l < config_.n_layers; ++l) {
      unsigned char* base = buf->data() + l * layer_bytes();
      KVHEAP_CUDA_CHECK(cudaMemcpyAsync(base + dst * slot_bytes, base + src * slot_bytes,
                                        slot_bytes * count, cudaMemcpyDeviceToDevice, nullptr));
    }
}

}  // namespace

std::unique_ptr<KVStorage> make_device_storage(const ModelConfig& config, DType kv,
                                               std::int64_t num_slots, const std::string& what) {
  return std::make_unique<DeviceKVStorage>(config, kv, num_slots, what);
}

}  // namespace kvheap
