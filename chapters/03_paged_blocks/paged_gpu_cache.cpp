// The paged pool in device memory: page tables uploaded once per batch, KV write through the slot
// mapping, and paged decode attention.
#include "chapters/03_paged_blocks/paged_gpu_cache.hpp"

#include <fmt/format.h>

#include <vector>

#include "common/error.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#include "kernels/decode_attention.hpp"
#include "kernels/kv_write.hpp"
#include "kernels/paged_attention.hpp"

namespace kvheap::ch03 {

/// Device storage: the pool and the per-batch arrays the kernels read.
struct PagedGpuCache::Device {
  DeviceBuffer<unsigned char> k;  // [n_layers, num_blocks, block_size, kv_dim] in the KV dtype
  DeviceBuffer<unsigned char> v;  // same
  // The int arrays of the batch, packed so that a batch costs two host-to-device copies:
  // [indptr (num_seqs + 1) | indices (pages) | last_page_len (num_seqs) | row_seq (n) | n_ctx (n)]
  DeviceBuffer<int> table;
  DeviceBuffer<std::int64_t> slot_mapping;  // [n] physical slot each row's K and V go to
  PagedLocator locator;                     // points into `table`
  const int* n_ctx = nullptr;               // [n], inside `table`
  cuda::AttentionWorkspace workspace;
};

namespace {
// Bytes of one layer's K (or V) pool.
std::size_t layer_bytes(const ModelConfig& c, DType kv, const BlockPool& pool) {
  return static_cast<std::size_t>(pool.num_blocks()) * pool.block_size() * c.kv_dim() *
         dtype_size(kv);
}

// Grows `buf` to at least `count` elements; contents are rewritten by the caller.
template <class T>
void ensure_size(DeviceBuffer<T>& buf, std::size_t count) {
  if (buf.size() >= count) return;
  buf.reset();  // free first: the old contents are about to be replaced
  buf = DeviceBuffer<T>(count);
}
}  // namespace

PagedGpuCache::PagedGpuCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
                             std::uint64_t shuffle_seed)
    : config_(config),
      kv_(kv),
      blocks_(num_blocks, block_size, shuffle_seed),
      dev_(std::make_unique<Device>()) {
  const std::size_t total = pool_bytes();
  std::size_t free_bytes = 0, total_bytes = 0;
  KVHEAP_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (total > free_bytes)
    throw ResourceError(fmt::format(
        "KV pool of {} blocks x {} tokens = {:.3f} MB exceeds the device's free memory ({:.3f} MB "
        "of {:.3f} MB)",
        num_blocks, block_size, total / 1e6, free_bytes / 1e6, total_bytes / 1e6));
  dev_->k = DeviceBuffer<unsigned char>(total / 2);
  dev_->v = DeviceBuffer<unsigned char>(total / 2);
  // Zeroed so that a kernel reading a slot nobody wrote sees zeros, not garbage.
  dev_->k.fill_bytes(0);
  dev_->v.fill_bytes(0);
}

PagedGpuCache::~PagedGpuCache() = default;

void PagedGpuCache::prepare(const Batch& batch) {
  current_ = build_paged_batch(blocks_, batch);
  const PagedBatch& pb = current_;
  const int n = batch.size();
  const std::size_t num_seqs = pb.last_page_len.size();
  std::vector<int> table;
  table.reserve(pb.indptr.size() + pb.indices.size() + num_seqs + 2 * static_cast<std::size_t>(n));
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
  ensure_size(dev_->table, table.size());
  ensure_size(dev_->slot_mapping, static_cast<std::size_t>(n));
  dev_->table.upload(table);
  dev_->slot_mapping.upload(pb.slot_mapping);
  const int* base = dev_->table.data();
  dev_->locator = PagedLocator{base + indptr_at, base + indices_at, base + last_at,
                               base + row_seq_at, blocks_.pool().block_size()};
  dev_->n_ctx = base + n_ctx_at;
}

void PagedGpuCache::write(int layer, const float* k, const float* v) {
  const std::size_t off = layer * layer_bytes(config_, kv_, blocks_.pool());
  // The slot mapping is a row index into [num_blocks * block_size, kv_dim]: exactly kv_write's
  // dst_rows, so chapter 2's write kernel serves the paged layout unchanged.
  cuda::kv_write(kv_, dev_->k.data() + off, dev_->v.data() + off, k, v, dev_->slot_mapping.data(),
                 static_cast<int>(current_.slot_mapping.size()), config_.kv_dim(), nullptr);
}

void PagedGpuCache::attend(int layer, const float* q, float* out) {
  const std::size_t off = layer * layer_bytes(config_, kv_, blocks_.pool());
  cuda::AttentionShape shape;
  shape.n = static_cast<int>(current_.n_ctx.size());
  shape.n_heads = config_.n_heads;
  shape.n_kv_heads = config_.n_kv_heads;
  shape.head_dim = config_.head_dim;
  shape.max_n_ctx = current_.max_ctx;
  cuda::paged_attention(kv_, q, dev_->k.data() + off, dev_->v.data() + off, dev_->n_ctx,
                        dev_->locator, shape, out, dev_->workspace, nullptr);
}

std::size_t PagedGpuCache::bytes_reserved() const {
  return blocks_.slots_held() * kv_bytes_per_token(config_, kv_);
}

std::size_t PagedGpuCache::bytes_used() const {
  return blocks_.tokens_held() * kv_bytes_per_token(config_, kv_);
}

std::size_t PagedGpuCache::pool_bytes() const {
  return 2 * static_cast<std::size_t>(config_.n_layers) * layer_bytes(config_, kv_, blocks_.pool());
}

}  // namespace kvheap::ch03
