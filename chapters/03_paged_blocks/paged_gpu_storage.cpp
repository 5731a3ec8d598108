// The paged pool in device memory: page tables uploaded once per batch, KV write through the slot
// mapping, and paged decode attention.
#include "chapters/03_paged_blocks/paged_gpu_storage.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "base/error.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#include "kernels/decode_attention.hpp"
#include "kernels/kv_write.hpp"

namespace kvheap::ch03 {

/// Device storage: the pool and the per-batch arrays the kernels read.
struct PagedGpuStorage::Device {
  DeviceBuffer<unsigned char> k;  // [n_layers, num_blocks, block_size, kv_dim] in the KV dtype
  DeviceBuffer<unsigned char> v;  // same
  // The int arrays of the batch, packed so that a batch costs two host-to-device copies:
  // [indptr (num_seqs + 1) | indices (pages) | last_page_len (num_seqs) | row_seq (n) | n_ctx (n)
  //  | a caller's extra ints]
  DeviceBuffer<int> table;
  DeviceBuffer<std::int64_t> slot_mapping;  // [n] physical slot each row's K and V go to
  PagedLocator locator;                     // points into `table`
  const int* n_ctx = nullptr;               // [n], inside `table`
  cuda::AttentionWorkspace workspace;
};

namespace {
// Grows `buf` to at least `count` elements; contents are rewritten by the caller.
template <class T>
void ensure_size(DeviceBuffer<T>& buf, std::size_t count) {
  if (buf.size() >= count) return;
  buf.reset();  // free first: the old contents are about to be replaced
  buf = DeviceBuffer<T>(count);
}
}  // namespace

PagedGpuStorage::PagedGpuStorage(const ModelConfig& config, DType kv, int num_blocks,
                                 int block_size)
    : config_(config),
      kv_(kv),
      num_blocks_(num_blocks),
      block_size_(block_size),
      dev_(std::make_unique<Device>()) {
  const std::size_t total = pool_bytes();
  require_free_device_memory(
      total, fmt::format("KV pool of {} blocks x {} tokens", num_blocks, block_size));
  dev_->k = DeviceBuffer<unsigned char>(total / 2);
  dev_->v = DeviceBuffer<unsigned char>(total / 2);
  // Zeroed so that a kernel reading a slot nobody wrote sees zeros, not garbage.
  dev_->k.fill_bytes(0);
  dev_->v.fill_bytes(0);
}

PagedGpuStorage::~PagedGpuStorage() = default;

const int* PagedGpuStorage::upload(const PagedBatch& pb, const std::vector<int>& extra) {
  const int n = static_cast<int>(pb.slot_mapping.size());
  std::vector<int> table;
  table.reserve(pb.indptr.size() + pb.indices.size() + pb.last_page_len.size() +
                2 * static_cast<std::size_t>(n) + extra.size());
  auto append = [&table](const std::vector<int>& part) {
    const std::size_t at = table.size();
    table.insert(table.end(), part.begin(), part.end());
    return at;
  };
  const std::size_t indptr_at = append(pb.indptr);
  const std::size_t indices_at = append(pb.indices);
  const std::size_t last_at = append(pb.last_page_len);
  const std::size_t row_seq_at = append(pb.row_seq);
  const std::size_t n_ctx_at = append(pb.n_ctx);
  const std::size_t extra_at = append(extra);
  ensure_size(dev_->table, table.size());
  ensure_size(dev_->slot_mapping, static_cast<std::size_t>(n));
  dev_->table.upload(table);
  dev_->slot_mapping.upload(pb.slot_mapping);
  const int* base = dev_->table.data();
  dev_->locator = PagedLocator{base + indptr_at, base + indices_at, base + last_at,
                               base + row_seq_at, block_size_};
  dev_->n_ctx = base + n_ctx_at;
  rows_ = n;
  max_ctx_ = pb.max_ctx;
  return base + extra_at;
}

void PagedGpuStorage::write(int layer, const float* k, const float* v) {
  const std::size_t off = layer * layer_bytes();
  // The slot mapping is a row index into [num_blocks * block_size, kv_dim]: exactly kv_write's
  // dst_rows, so chapter 2's write kernel serves the paged layout unchanged.
  cuda::kv_write(kv_, dev_->k.data() + off, dev_->v.data() + off, k, v, dev_->slot_mapping.data(),
                 rows_, config_.kv_dim(), nullptr);
}

void PagedGpuStorage::attend(int layer, const float* q, float* out) {
  cuda::AttentionShape shape;
  shape.n = rows_;
  shape.n_heads = config_.n_heads;
  shape.n_kv_heads = config_.n_kv_heads;
  shape.head_dim = config_.head_dim;
  shape.max_n_ctx = max_ctx_;
  cuda::paged_attention(kv_, q, k_layer(layer), v_layer(layer), dev_->n_ctx, dev_->locator, shape,
                        out, dev_->workspace, nullptr);
}

void PagedGpuStorage::copy_block(int src, int dst, int slots) {
  if (src < 0 || src >= num_blocks_ || dst < 0 || dst >= num_blocks_ || slots < 0 ||
      slots > block_size_)
    throw std::logic_error(fmt::format("copy_block({}, {}, {}) outside {} blocks of {} slots", src,
                                       dst, slots, num_blocks_, block_size_));
  const std::size_t slot_bytes = static_cast<std::size_t>(config_.kv_dim()) * dtype_size(kv_);
  const std::size_t block_bytes = slot_bytes * block_size_;
  for (DeviceBuffer<unsigned char>* buf : {&dev_->k, &dev_->v})
    for (int l = 0; l < config_.n_layers; ++l) {
      unsigned char* base = buf->data() + l * layer_bytes();
      KVHEAP_CUDA_CHECK(cudaMemcpyAsync(base + dst * block_bytes, base + src * block_bytes,
                                        slot_bytes * slots, cudaMemcpyDeviceToDevice, nullptr));
    }
}

const void* PagedGpuStorage::k_layer(int layer) const {
  return dev_->k.data() + layer * layer_bytes();
}

const void* PagedGpuStorage::v_layer(int layer) const {
  return dev_->v.data() + layer * layer_bytes();
}

const PagedLocator& PagedGpuStorage::locator() const { return dev_->locator; }

std::size_t PagedGpuStorage::layer_bytes() const {
  return static_cast<std::size_t>(num_blocks_) * block_size_ * config_.kv_dim() * dtype_size(kv_);
}

std::size_t PagedGpuStorage::pool_bytes() const {
  return 2 * static_cast<std::size_t>(config_.n_layers) * layer_bytes();
}

}  // namespace kvheap::ch03
