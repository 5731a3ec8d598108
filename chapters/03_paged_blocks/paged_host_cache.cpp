#include "chapters/03_paged_blocks/paged_host_cache.hpp"

#include <fmt/format.h>

#include "common/error.hpp"
#include "kernels/attention.hpp"
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
        "one sequence of {} tokens needs",
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
  k_.resize(bytes);
  v_.resize(bytes);
}

void PagedHostCache::write(int layer, const Batch& batch, const float* k, const float* v) {
  // The page tables grow once per batch, at layer 0; later layers reuse the same slots.
  if (layer == 0) current_ = build_paged_batch(blocks_, batch);
  const long kv_dim = config_.kv_dim();
  const long layer_rows =
      static_cast<long>(blocks_.pool().num_blocks()) * blocks_.pool().block_size();
  cpu::with_kv_type(kv_, [&](auto tag) {
    using T = decltype(tag);
    T* kd = reinterpret_cast<T*>(k_.data()) + layer * layer_rows * kv_dim;
    T* vd = reinterpret_cast<T*>(v_.data()) + layer * layer_rows * kv_dim;
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
  const int n = batch.size();
  const int group = config_.group_size();
  const int hd = config_.head_dim;
  const long kv_dim = config_.kv_dim();
  const int bs = blocks_.pool().block_size();
  const long layer_rows = static_cast<long>(blocks_.pool().num_blocks()) * bs;
  long work = 0;
  for (int i = 0; i < n; ++i) work += 2L * current_.n_ctx[i] * config_.q_dim();
  cpu::with_kv_type(kv_, [&](auto tag) {
    using T = decltype(tag);
    const T* kd = reinterpret_cast<const T*>(k_.data()) + layer * layer_rows * kv_dim;
    const T* vd = reinterpret_cast<const T*>(v_.data()) + layer * layer_rows * kv_dim;
    // Same work split and same arithmetic as chapter 1's attend: only addresses differ, so the
    // results are bitwise equal.
#pragma omp parallel if (work >= (1L << 16))
    {
      std::vector<float> scores;
#pragma omp for schedule(dynamic)
      for (long item = 0; item < static_cast<long>(n) * config_.n_kv_heads; ++item) {
        const int i = static_cast<int>(item / config_.n_kv_heads);
        const int g = static_cast<int>(item % config_.n_kv_heads);
        const int s = current_.row_seq[i];
        const cpu::PagedRows<T> rows{kd, vd, current_.indices.data() + current_.indptr[s], bs,
                                     kv_dim};
        scores.resize(static_cast<std::size_t>(group) * current_.n_ctx[i]);
        const long qo = (static_cast<long>(i) * config_.n_heads + g * group) * hd;
        cpu::attend_group<T>(q + qo, rows, current_.n_ctx[i], g, group, hd, out + qo,
                             scores.data());
      }
    }
  });
}

std::size_t PagedHostCache::bytes_reserved() const {
  return blocks_.slots_held() * kv_bytes_per_token(config_, kv_);
}

std::size_t PagedHostCache::bytes_used() const {
  return blocks_.tokens_held() * kv_bytes_per_token(config_, kv_);
}

}  // namespace kvheap::ch03
