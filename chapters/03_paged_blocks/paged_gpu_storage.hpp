// Paged K and V storage in device memory, read and written through a PagedBatch.
//
// The device twin of PagedHostStorage: the pool, the per-batch arrays its kernels read (page
// tables in CSR form, each row's sequence and context, the slot mapping), and the KV write and
// paged attention over them. Chapter 3's cache and chapter 4's sharing cache both keep their K
// and V here; chapter 4 adds its own attention over the same pool and tables.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "chapters/03_paged_blocks/paged_batch.hpp"
#include "common/model_config.hpp"
#include "kernels/paged_attention.hpp"

namespace kvheap::ch03 {

/// \brief Per layer, K and V device arrays [num_blocks, block_size, n_kv_heads, head_dim],
/// allocated (and zeroed) up front, as a server does with its KV budget.
class PagedGpuStorage {
 public:
  /// \brief Storage for `num_blocks` blocks of `block_size` slots in every layer, in `kv`. Throws
  /// ResourceError when the pool does not fit the device's free memory.
  PagedGpuStorage(const ModelConfig& config, DType kv, int num_blocks, int block_size);
  ~PagedGpuStorage();
  PagedGpuStorage(const PagedGpuStorage&) = delete;
  PagedGpuStorage& operator=(const PagedGpuStorage&) = delete;

  /// \brief Uploads a batch's page tables, row map, context lengths and slot mapping in two
  /// host-to-device copies, with `extra` ints packed after them (a caller's own per-batch arrays);
  /// returns the device address of the first extra int.
  const int* upload(const PagedBatch& pages, const std::vector<int>& extra = {});
  /// \brief Stores the last uploaded batch's K and V rows of `layer` at their slots.
  /// \param layer which transformer block, 0-based
  /// \param k [rows, kv_dim] fp32 device memory
  /// \param v [rows, kv_dim] fp32 device memory
  void write(int layer, const float* k, const float* v);
  /// \brief Paged decode attention of the last uploaded batch's rows (cuda::paged_attention).
  /// \param layer which transformer block, 0-based
  /// \param q   [rows, q_dim] fp32 device memory
  /// \param out [rows, q_dim] fp32 device memory, written
  void attend(int layer, const float* q, float* out);
  /// \brief Copies the first `slots` slots of block `src` into block `dst`, K and V of every layer
  /// (chapter 4's copy-on-write), on the stream the kernels use.
  void copy_block(int src, int dst, int slots);

  /// \brief `layer`'s K pool (device memory, in the KV dtype).
  [[nodiscard]] const void* k_layer(int layer) const;
  /// \brief `layer`'s V pool.
  [[nodiscard]] const void* v_layer(int layer) const;
  /// \brief The last uploaded batch's page tables (device pointers).
  [[nodiscard]] const PagedLocator& locator() const;
  /// \brief Bytes of device memory the whole pool occupies, free blocks included.
  [[nodiscard]] std::size_t pool_bytes() const;

 private:
  [[nodiscard]] std::size_t layer_bytes() const;  // one layer's K (or V) pool

  struct Device;  // device buffers and the attention workspace, kept out of this header
  ModelConfig config_;
  DType kv_;
  int num_blocks_;
  int block_size_;
  int rows_ = 0;     // rows of the last uploaded batch
  int max_ctx_ = 0;  // longest context among them
  std::unique_ptr<Device> dev_;
};

}  // namespace kvheap::ch03
