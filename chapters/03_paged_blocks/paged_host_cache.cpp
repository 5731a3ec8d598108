#include "chapters/03_paged_blocks/paged_host_cache.hpp"

#include <fmt/format.h>

#include "common/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/attention_batch.hpp"
#include "kernels/paged_attention.hpp"

namespace kvheap::ch03 {

int blocks_for_budget(const ModelConfig& c, DType kv, std::size_t budget_bytes, int block_size,
                      int min_tokens) {
  if (block_size <= 0)
    throw UsageError(fmt::format("--block-size must be positive, got {}", block_size));
  const std::size_t per_block = kv_bytes_per_token(c, kv) * static_cast<std::size_t>(block_size);
  const std::size_t blocks = budget_bytes / per_block;
  const std::size_t need = (static_cast<std::size_t>(min_tokens) + block_size - 1) / block_size;
  if (blocks < need || blocks == 0)
    throw ResourceError(fmt::format(
        "KV budget of {:.3f} MB holds {} blocks of {} tokens ({:.3f} MB each), fewer than the {} "
        "blocks one sequence of {} tokens needs",
        budget_bytes / 1e6, blocks, block_size, per_block / 1e6, need, min_tokens));
  if (blocks > (std::size_t{1} << 30))
    throw ResourceError(
        fmt::format("KV budget of {:.3f} MB means {} blocks; more than 2^30 is "
                    "not supported",
                    budget_bytes / 1e6, blocks));
  return static_cast<int>(blocks);
}

PagedHostCache::PagedHostCache(const ModelConfig& config, DType kv, int num_blocks, int block_size,
                               std::uint64_t shuffle_seed)
    : config_(config), kv_(kv), blocks_(num_blocks, block_size, shuffle_seed) {
  const std::size_t bytes =
      static_cast<std::size_t>(num_blocks) * block_size * kv_bytes_per_token(config, kv) / 2;
  k_ = HostBuffer(bytes);
  v_ = HostBuffer(bytes);
}

void PagedHostCache::prepare(const Batch& batch) { current_ = build_paged_batch(blocks_, batch); }

void PagedHostCache::write(int layer, const Batch& batch, const float* k, const float* v) {
  const long kv_dim = config_.kv_dim();
  const long layer_rows =
      static_cast<long>(blocks_.pool().num_blocks()) * blocks_.pool().block_size();
  cpu::with_kv_type(kv_, [&](auto tag) {
    using T = decltype(tag);
    T* kd = k_.as<T>() + layer * layer_rows * kv_dim;
    T* vd = v_.as<T>() + layer * layer_rows * kv_dim;
    for (int i = 0; i < batch.size(); ++i) {
      const long dst = current_.slot_mapping[i] * kv_dim;
      for (long e = 0; e < kv_dim; ++e) {
        cpu::from_float(k[i * kv_dim + e], kd[dst + e]);
        cpu::from_float(v[i * kv_dim + e], vd[dst + e]);
      }
    }
  });
}

void PagedHostCache::attend(int layer, const Batch& batch, const float* q, float* out) {
  const long kv_dim = config_.kv_dim();
  const int bs = blocks_.pool().block_size();
  const long layer_rows = static_cast<long>(blocks_.pool().num_blocks()) * bs;
  cpu::with_kv_type(kv_, [&](auto tag) {
    using T = decltype(tag);
    const T* kd = k_.as<T>() + layer * layer_rows * kv_dim;
    const T* vd = v_.as<T>() + layer * layer_rows * kv_dim;
    // Chapter 1's work split and arithmetic through a page-table accessor: only addresses
    // differ, so the results are bitwise equal.
    cpu::attend_batch<T>(
        config_, batch.size(),
        [&](int i) {
          const int s = current_.row_seq[i];
          return cpu::PagedRows<T>{kd, vd, current_.indices.data() + current_.indptr[s], bs,
                                   kv_dim};
        },
        [&](int i) { return current_.n_ctx[i]; }, q, out);
  });
}

std::size_t PagedHostCache::bytes_reserved() const {
  return blocks_.slots_held() * kv_bytes_per_token(config_, kv_);
}

std::size_t PagedHostCache::bytes_used() const {
  return blocks_.tokens_held() * kv_bytes_per_token(config_, kv_);
}

}  // namespace kvheap::ch03
