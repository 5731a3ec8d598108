// The device storage: K and V in device memory, the batch's view uploaded once per batch, and
// the CUDA kernels (kv_write, decode_attention, paged_attention, shared_prefix_attention).
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "base/error.hpp"
#include "common/cache/kv_storage.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#include "device/staged_upload.hpp"
#include "kernels/decode_attention.hpp"
#include "kernels/kv_write.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/shared_prefix_attention.hpp"

namespace kvheap {
namespace {

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
    // The prefix pass reads a prefix once per slice of at most prefix_heads_per_read heads.
    return view_.prefixes.positions_read(view_.n_ctx, config_.group_size(),
                                         cuda::prefix_heads_per_read(kv_, config_.head_dim));
  }
  [[nodiscard]] std::vector<long> shared_positions_read() const override {
    return view_.prefixes.positions_read_by_level(
        config_.group_size(), cuda::prefix_heads_per_read(kv_, config_.head_dim));
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
  // The view's arrays reach the device in the forward pass's one upload (StagedUpload::current());
  // a cache prepared outside a pass (tests) sends them itself, through own_. Their device
  // addresses are known once that upload has been queued, so write() and attend() bind them.
  //   ints:  n_ctx (n), indptr, indices, last_page_len, row_seq (n), the prefix plan's arrays
  //   int64: slot_mapping (n), first_slot (n, contiguous only)
  void bind();
  StagedUpload own_;
  const StagedUpload* staged_ = nullptr;  // where the loaded view went
  std::vector<std::size_t> at_;           // offset of each ints part in it
  std::size_t slots_at_ = 0;              // offset of the slot mapping
  std::size_t first_slot_at_ = 0;         // offset of first_slot (contiguous only)
  bool bound_ = false;
  KVView view_;  // host copy of the loaded view
  const std::int64_t* slots_ = nullptr;
  const int* n_ctx_ = nullptr;
  const std::int64_t* first_slot_ = nullptr;
  PagedLocator locator_;
  SharedPrefixView prefix_;
  DeviceBuffer<float> wide_q_;  // the prefix pass's gathered queries
  cuda::AttentionWorkspace workspace_, own_workspace_;
  SideStream side_;  // the rows' own pass of shared-prefix attention, beside the prefix pass
};

void DeviceKVStorage::load(KVView view) {
  view_ = std::move(view);
  StagedUpload* up = StagedUpload::current();
  const bool own = up == nullptr;
  if (own) {
    up = &own_;
    up->clear();  // the previous batch's copy has completed: own uploads wait for it below
  }
  staged_ = up;
  bound_ = false;
  at_.clear();
  const auto add = [&](const std::vector<int>& part) { at_.push_back(up->add<int>(part)); };
  add(view_.n_ctx);
  if (view_.paged) {
    add(view_.indptr);
    add(view_.indices);
    add(view_.last_page_len);
    add(view_.row_seq);
  }
  prefix_ = SharedPrefixView{};
  if (view_.paged && view_.prefixes.groups() > 0) {
    const SharedPrefixArrays plan(view_.prefixes, view_.row_seq, view_.n_ctx);
    for (const std::vector<int>* part :
         {&plan.prefix_len, &plan.prefix_begin, &plan.prefix_seq, &plan.group_rows,
          &plan.group_size, &plan.first, &plan.own_ctx, &plan.path_at, &plan.path_group,
          &plan.path_member})
      add(*part);
    prefix_.groups = view_.prefixes.groups();
    prefix_.widest = plan.widest;
    prefix_.max_prefix = *std::max_element(plan.prefix_len.begin(), plan.prefix_len.end());
    prefix_.max_own = *std::max_element(plan.own_ctx.begin(), plan.own_ctx.end());
    wide_q_.grow(static_cast<std::size_t>(cuda::shared_prefix_wide_q_floats(
        prefix_.groups, prefix_.widest, config_.n_heads, config_.head_dim)));
  }
  slots_at_ = up->add<std::int64_t>(view_.slot_mapping);
  if (!view_.paged) first_slot_at_ = up->add<std::int64_t>(view_.first_slot);
  if (own) {
    own_.upload(nullptr);
    KVHEAP_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // own_ may be rewritten by the next load
  }
}

void DeviceKVStorage::bind() {
  if (bound_) return;
  bound_ = true;
  slots_ = staged_->device<std::int64_t>(slots_at_);
  const auto ints = [&](std::size_t part) { return staged_->device<int>(at_[part]); };
  n_ctx_ = ints(0);
  first_slot_ = view_.paged ? nullptr : staged_->device<std::int64_t>(first_slot_at_);
  if (view_.paged) locator_ = PagedLocator{ints(1), ints(2), ints(3), ints(4), view_.block_size};
  if (prefix_.groups == 0) return;
  prefix_.prefix_len = ints(5);
  prefix_.prefix_begin = ints(6);
  prefix_.prefix_seq = ints(7);
  prefix_.group_rows = ints(8);
  prefix_.group_size = ints(9);
  prefix_.first = ints(10);
  prefix_.own_ctx = ints(11);
  prefix_.path_at = ints(12);
  prefix_.path_group = ints(13);
  prefix_.path_member = ints(14);
}

void DeviceKVStorage::write(int layer, const float* k, const float* v) {
  bind();
  const std::size_t off = layer * layer_bytes();
  // The slot mapping is a row index into [num_slots, kv_dim]: exactly kv_write's dst_rows, so one
  // write kernel serves every layout.
  cuda::kv_write(kv_, k_.data() + off, v_.data() + off, k, v, slots_, view_.rows(),
                 config_.kv_dim(), nullptr);
}

void DeviceKVStorage::attend(int layer, const float* q, float* out) {
  bind();
  const std::size_t off = layer * layer_bytes();
  const void* kd = k_.data() + off;
  const void* vd = v_.data() + off;
  if (!view_.paged) {
    cuda::decode_attention(kv_, q, kd, vd, n_ctx_, first_slot_, shape(), out, workspace_, nullptr);
  } else if (view_.prefixes.groups() == 0) {
    cuda::paged_attention(kv_, q, kd, vd, n_ctx_, locator_, shape(), out, workspace_, nullptr);
  } else {
    cuda::shared_prefix_attention(kv_, q, kd, vd, locator_, prefix_, shape(), out, wide_q_.data(),
                                  workspace_, own_workspace_, nullptr, 0, &side_);
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
