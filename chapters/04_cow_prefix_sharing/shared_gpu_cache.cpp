#include "chapters/04_cow_prefix_sharing/shared_gpu_cache.hpp"

#include <algorithm>
#include <vector>

#include "device/buffers.hpp"
#include "kernels/decode_attention.hpp"
#include "kernels/shared_prefix_attention.hpp"

namespace kvheap::ch04 {

struct SharedGpuCache::Device {
  SharedPrefixView view;  // points into the storage's uploaded table
  DeviceBuffer<float> wide_q;
  cuda::AttentionWorkspace prefix_ws, own_ws;
};

SharedGpuCache::SharedGpuCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
                               std::uint64_t shuffle_seed, bool read_once)
    : config_(config),
      kv_(kv),
      bytes_per_token_(kv_bytes_per_token(config, kv)),
      read_once_(read_once),
      blocks_(num_blocks, block_size, shuffle_seed),
      storage_(config, kv, num_blocks, block_size),
      dev_(std::make_unique<Device>()) {}

SharedGpuCache::~SharedGpuCache() = default;

void SharedGpuCache::prepare(const Batch& batch) {
  current_ = build_shared_batch(blocks_, batch);
  for (const BlockCopy& c : current_.copies) storage_.copy_block(c.src, c.dst, c.slots);
  const SharedPrefixPlan& plan = current_.prefixes;
  if (!read_once_ || plan.groups() == 0) {
    (void)storage_.upload(current_.pages);
    return;
  }
  // The plan's arrays travel in the same upload as the page tables, packed in this order.
  const SharedPrefixArrays a(plan, current_.pages.row_seq, current_.pages.n_ctx);
  std::vector<int> extra;
  const std::vector<int>* parts[] = {&a.prefix_len, &a.prefix_seq, &a.group_rows, &a.group_size,
                                     &a.first,      &a.own_ctx,    &a.row_group,  &a.row_member};
  std::vector<std::size_t> at;
  for (const std::vector<int>* p : parts) {
    at.push_back(extra.size());
    extra.insert(extra.end(), p->begin(), p->end());
  }
  const int* base = storage_.upload(current_.pages, extra);
  SharedPrefixView& v = dev_->view;
  v.groups = plan.groups();
  v.widest = a.widest;
  v.max_prefix = *std::max_element(a.prefix_len.begin(), a.prefix_len.end());
  v.max_own = *std::max_element(a.own_ctx.begin(), a.own_ctx.end());
  v.prefix_len = base + at[0];
  v.prefix_seq = base + at[1];
  v.group_rows = base + at[2];
  v.group_size = base + at[3];
  v.first = base + at[4];
  v.own_ctx = base + at[5];
  v.row_group = base + at[6];
  v.row_member = base + at[7];
  const std::size_t wide =
      cuda::shared_prefix_wide_q_floats(v.groups, v.widest, config_.n_heads, config_.head_dim);
  if (dev_->wide_q.size() < wide) {
    dev_->wide_q.reset();
    dev_->wide_q = DeviceBuffer<float>(wide);
  }
}

void SharedGpuCache::write(int layer, const float* k, const float* v) {
  storage_.write(layer, k, v);
}

void SharedGpuCache::attend(int layer, const float* q, float* out) {
  if (!read_once_ || current_.prefixes.groups() == 0) {
    storage_.attend(layer, q, out);
    return;
  }
  cuda::AttentionShape shape;
  shape.n = static_cast<int>(current_.pages.n_ctx.size());
  shape.n_heads = config_.n_heads;
  shape.n_kv_heads = config_.n_kv_heads;
  shape.head_dim = config_.head_dim;
  shape.max_n_ctx = current_.pages.max_ctx;
  cuda::shared_prefix_attention(kv_, q, storage_.k_layer(layer), storage_.v_layer(layer),
                                storage_.locator(), dev_->view, shape, out, dev_->wide_q.data(),
                                dev_->prefix_ws, dev_->own_ws);
}

long SharedGpuCache::positions_read() const {
  // The kernel reads a prefix once per slice of 16 query heads per KV head.
  return ch04::positions_read(current_, read_once_, config_.group_size(), kGpuHeadsPerBlock);
}

std::size_t SharedGpuCache::bytes_reserved() const {
  return blocks_.slots_in_use() * bytes_per_token_;
}

std::size_t SharedGpuCache::bytes_used() const { return blocks_.slots_stored() * bytes_per_token_; }

}  // namespace kvheap::ch04
