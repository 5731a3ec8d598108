#include "chapters/03_paged_blocks/paged_host_storage.hpp"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "kernels/decode_attention_cpu.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/shared_prefix_attention_cpu.hpp"

namespace kvheap::ch03 {

PagedHostStorage::PagedHostStorage(const ModelConfig& config, DType kv, int num_blocks,
                                   int block_size)
    : config_(config), kv_(kv), num_blocks_(num_blocks), block_size_(block_size) {
  const std::size_t bytes =
      static_cast<std::size_t>(num_blocks) * block_size * kv_bytes_per_token(config, kv) / 2;
  k_ = HostBuffer(bytes);
  v_ = HostBuffer(bytes);
}

void PagedHostStorage::write(int layer, const Batch& batch, const PagedBatch& pages, const float* k,
                             const float* v) {
  const long kv_dim = config_.kv_dim();
  const long layer_rows = static_cast<long>(num_blocks_) * block_size_;
  cpu::with_kv_type(kv_, [&](auto tag) {
    using T = decltype(tag);
    T* kd = k_.as<T>() + layer * layer_rows * kv_dim;
    T* vd = v_.as<T>() + layer * layer_rows * kv_dim;
    for (int i = 0; i < batch.size(); ++i) {
      const long dst = pages.slot_mapping[i] * kv_dim;
      for (long e = 0; e < kv_dim; ++e) {
        cpu::from_float(k[i * kv_dim + e], kd[dst + e]);
        cpu::from_float(v[i * kv_dim + e], vd[dst + e]);
      }
    }
  });
}

void PagedHostStorage::attend(int layer, const Batch& batch, const PagedBatch& pages,
                              const float* q, float* out, const SharedPrefixPlan* shared) const {
  const long kv_dim = config_.kv_dim();
  const int bs = block_size_;
  const long layer_rows = static_cast<long>(num_blocks_) * bs;
  const cpu::AttendShape shape{config_.n_kv_heads, config_.group_size(), config_.head_dim};
  cpu::with_kv_type(kv_, [&](auto tag) {
    using T = decltype(tag);
    const T* kd = k_.as<T>() + layer * layer_rows * kv_dim;
    const T* vd = v_.as<T>() + layer * layer_rows * kv_dim;
    const auto rows_of = [&](int i) {
      const int s = pages.row_seq[i];
      return cpu::PagedRows<T>{kd, vd, pages.indices.data() + pages.indptr[s], bs, kv_dim};
    };
    const auto n_ctx_of = [&](int i) { return pages.n_ctx[i]; };
    if (shared != nullptr)
      cpu::attend_batch_shared_prefix<T>(shape, batch.size(), rows_of, n_ctx_of, *shared, q, out);
    else
      cpu::attend_batch<T>(shape, batch.size(), rows_of, n_ctx_of, q, out);
  });
}

void PagedHostStorage::copy_block(int src, int dst, int slots) {
  if (src < 0 || src >= num_blocks_ || dst < 0 || dst >= num_blocks_ || slots < 0 ||
      slots > block_size_)
    throw std::logic_error(fmt::format("copy_block({}, {}, {}) outside {} blocks of {} slots", src,
                                       dst, slots, num_blocks_, block_size_));
  const std::size_t slot_bytes = static_cast<std::size_t>(config_.kv_dim()) * dtype_size(kv_);
  const std::size_t layer_bytes = slot_bytes * num_blocks_ * block_size_;
  const std::size_t block_bytes = slot_bytes * block_size_;
  for (HostBuffer* buf : {&k_, &v_})
    for (int l = 0; l < config_.n_layers; ++l) {
      unsigned char* base = buf->data() + l * layer_bytes;
      std::memcpy(base + dst * block_bytes, base + src * block_bytes, slot_bytes * slots);
    }
}

}  // namespace kvheap::ch03
