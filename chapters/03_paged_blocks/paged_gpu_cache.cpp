#include "chapters/03_paged_blocks/paged_gpu_cache.hpp"

#include "chapters/03_paged_blocks/paged_batch.hpp"

namespace kvheap::ch03 {

PagedGpuCache::PagedGpuCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
                             std::uint64_t shuffle_seed)
    : bytes_per_token_(kv_bytes_per_token(config, kv)),
      blocks_(num_blocks, block_size, shuffle_seed),
      storage_(config, kv, num_blocks, block_size) {}

void PagedGpuCache::prepare(const Batch& batch) {
  (void)storage_.upload(build_paged_batch(blocks_, batch));
}

void PagedGpuCache::write(int layer, const float* k, const float* v) {
  storage_.write(layer, k, v);
}

void PagedGpuCache::attend(int layer, const float* q, float* out) {
  storage_.attend(layer, q, out);
}

std::size_t PagedGpuCache::bytes_reserved() const {
  return blocks_.slots_held() * bytes_per_token_;
}

std::size_t PagedGpuCache::bytes_used() const { return blocks_.tokens_held() * bytes_per_token_; }

}  // namespace kvheap::ch03
