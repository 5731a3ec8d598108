#include "chapters/03_paged_blocks/paged_host_cache.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace kvheap::ch03 {

PagedHostCache::PagedHostCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
                               std::uint64_t shuffle_seed)
    : bytes_per_token_(kv_bytes_per_token(config, kv)),
      blocks_(num_blocks, block_size, shuffle_seed),
      storage_(config, kv, num_blocks, block_size) {}

void PagedHostCache::prepare(const Batch& batch) { current_ = build_paged_batch(blocks_, batch); }

void PagedHostCache::write(int layer, const Batch& batch, const float* k, const float* v) {
  storage_.write(layer, batch, current_, k, v);
}

void PagedHostCache::attend(int layer, const Batch& batch, const float* q, float* out) {
  storage_.attend(layer, batch, current_, q, out);
}

std::size_t PagedHostCache::bytes_reserved() const {
  return blocks_.slots_held() * bytes_per_token_;
}

std::size_t PagedHostCache::bytes_used() const { return blocks_.tokens_held() * bytes_per_token_; }

}  // namespace kvheap::ch03
