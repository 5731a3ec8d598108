#include "chapters/04_cow_prefix_sharing/shared_host_cache.hpp"

namespace kvheap::ch04 {

SharedHostCache::SharedHostCache(const ModelConfig& config, DType kv, int num_blocks,
                                 int block_size, std::uint64_t shuffle_seed, bool read_once)
    : bytes_per_token_(kv_bytes_per_token(config, kv)),
      blocks_(num_blocks, block_size, shuffle_seed),
      storage_(config, kv, num_blocks, block_size),
      read_once_(read_once) {}

void SharedHostCache::prepare(const Batch& batch) {
  current_ = build_shared_batch(blocks_, batch);
  for (const BlockCopy& c : current_.copies) storage_.copy_block(c.src, c.dst, c.slots);
}

void SharedHostCache::write(int layer, const Batch& batch, const float* k, const float* v) {
  storage_.write(layer, batch, current_.pages, k, v);
}

void SharedHostCache::attend(int layer, const Batch& batch, const float* q, float* out) {
  storage_.attend(layer, batch, current_.pages, q, out, read_once_ ? &current_.prefixes : nullptr);
}

std::size_t SharedHostCache::bytes_reserved() const {
  return blocks_.slots_in_use() * bytes_per_token_;
}

long SharedHostCache::positions_read() const { return ch04::positions_read(current_, read_once_); }

std::size_t SharedHostCache::bytes_used() const {
  return blocks_.slots_stored() * bytes_per_token_;
}

}  // namespace kvheap::ch04
