// Paged K and V storage in host memory, read and written through a PagedBatch.
//
// The storage knows blocks and slots, not sequences: which slot a row writes and which blocks a
// row reads come from the batch the allocator built. Chapter 3's cache and chapter 4's sharing
// cache keep their K and V here, so both read through the same CPU attention twin.
#pragma once

#include "chapters/03_paged_blocks/paged_batch.hpp"
#include "common/batch.hpp"
#include "common/host_buffer.hpp"
#include "common/model_config.hpp"
#include "kernels/shared_prefix_attention.hpp"

namespace kvheap::ch03 {

/// \brief Per layer, K and V in [num_blocks, block_size, n_kv_heads, head_dim] host arrays.
class PagedHostStorage {
 public:
  /// \brief Storage for `num_blocks` blocks of `block_size` slots in every layer, in `kv`.
  PagedHostStorage(const ModelConfig& config, DType kv, int num_blocks, int block_size);

  /// \brief Stores row i's K and V at `pages.slot_mapping[i]` of `layer`.
  /// \param layer which transformer block, 0-based
  /// \param batch the rows being run
  /// \param pages the batch's page tables and slot mapping
  /// \param k [batch.size(), kv_dim] fp32
  /// \param v [batch.size(), kv_dim] fp32
  void write(int layer, const Batch& batch, const PagedBatch& pages, const float* k,
             const float* v);
  /// \brief Causal attention of every row over its sequence's blocks (chapter 1's arithmetic
  /// through a page-table accessor, so only addresses differ from it). With a `shared` plan
  /// (chapter 4), each group of rows reads its shared prefix once for all of them.
  /// \param layer  which transformer block, 0-based
  /// \param batch  the rows being run
  /// \param pages  the batch's page tables
  /// \param q      [batch.size(), q_dim] fp32
  /// \param out    [batch.size(), q_dim] fp32, written
  /// \param shared rows that share a prefix, or nullptr to read every context whole
  void attend(int layer, const Batch& batch, const PagedBatch& pages, const float* q, float* out,
              const SharedPrefixPlan* shared = nullptr) const;
  /// \brief Copies the first `slots` slots of block `src` into block `dst`, K and V of every
  /// layer (chapter 4's copy-on-write).
  void copy_block(int src, int dst, int slots);

 private:
  ModelConfig config_;
  DType kv_;
  int num_blocks_;
  int block_size_;
  HostBuffer k_;  // [n_layers, num_blocks * block_size, kv_dim] in the KV dtype
  HostBuffer v_;  // same
};

}  // namespace kvheap::ch03
