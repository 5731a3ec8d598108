// KV write: store a batch's K and V rows into the cache, narrowed to the KV dtype.
//
// The cache is viewed as a flat array of rows, [rows, kv_dim] with kv_dim = n_kv_heads *
// head_dim, and each batch row says which cache row it goes to. That one index serves every
// layout: the contiguous reservation of chapter 2 (row = slot * max_seq_len + pos) and the paged
// pool of chapter 3 (row = block_id * block_size + pos % block_size). The allocator decides the
// index on the host; the kernel only copies and rounds.
//
// Rounding is round-to-nearest-even, the rounding of __float2half_rn / __float2bfloat16_rn and of
// base/half.hpp, so the CUDA kernel and its CPU twin store identical bits.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"
#include "kernels/cuda_stream.hpp"

namespace kvheap::cpu {

/// \brief CPU twin of cuda::kv_write: k_cache[dst_rows[i]] = round(k[i]), same for v.
/// \param k_cache  [rows, kv_dim] in the KV dtype `kv`, host memory, written
/// \param v_cache  [rows, kv_dim] in the KV dtype `kv`, host memory, written
/// \param k        [n, kv_dim] fp32
/// \param v        [n, kv_dim] fp32
/// \param dst_rows [n] cache row of each batch row
void kv_write(DType kv, void* k_cache, void* v_cache, const float* k, const float* v,
              const std::int64_t* dst_rows, int n, int kv_dim);

}  // namespace kvheap::cpu

namespace kvheap::cuda {

/// \brief Stores K and V rows in the cache: k_cache[dst_rows[i]] = round(k[i]), same for v.
///
/// All pointers are device memory. Rows of dst_rows must be distinct (two batch rows never own
/// the same (sequence, position)); the kernel does not check that.
/// \param kv       element type of the caches: fp32, fp16 (__half) or bf16 (__nv_bfloat16)
/// \param k_cache  [rows, kv_dim] written
/// \param v_cache  [rows, kv_dim] written
/// \param k        [n, kv_dim] fp32, RoPE applied
/// \param v        [n, kv_dim] fp32
/// \param dst_rows [n] cache row of each batch row
void kv_write(DType kv, void* k_cache, void* v_cache, const float* k, const float* v,
              const std::int64_t* dst_rows, int n, int kv_dim, StreamHandle stream = nullptr);

}  // namespace kvheap::cuda
