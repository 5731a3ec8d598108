// Per-head RMSNorm of q and k (Qwen3's q_norm and k_norm), applied after the projections and
// before RoPE.
//
// Each head of q and k is normalised on its own over its head_dim values and scaled by a gain
// shared by all heads of that tensor: y = x / sqrt(mean(x^2) + eps) * gain. It bounds the size of
// q.k however large the projections grow. It must come before RoPE: the rotation mixes pairs of
// dimensions, so a per-dimension gain applied after it would no longer commute with the rotation
// and attention would stop depending only on relative positions.
#pragma once

#include "kernels/cuda_stream.hpp"

namespace kvheap::cpu {

/// \brief Normalises each head of q[n, n_heads, head_dim] with q_gain[head_dim] and each head of
/// k[n, n_kv_heads, head_dim] with k_gain[head_dim], in place.
///
/// The same arithmetic as cpu::rmsnorm over rows of head_dim (mean of squares in fp32, left to
/// right), which is what it calls: a [n, heads, head_dim] tensor is [n * heads, head_dim] rows.
void qk_norm(float* q, float* k, const float* q_gain, const float* k_gain, int n, int n_heads,
             int n_kv_heads, int head_dim, float eps);

}  // namespace kvheap::cpu

namespace kvheap::cuda {

/// \brief CUDA twin of cpu::qk_norm on device memory (qk_norm.cu): one warp per head of q and
/// of k, both tensors in one launch, the mean of squares summed in fp32 through warp shuffles.
/// \param q      [n, n_heads, head_dim] normalised in place
/// \param k      [n, n_kv_heads, head_dim] normalised in place
/// \param q_gain [head_dim]
/// \param k_gain [head_dim]
void qk_norm(float* q, float* k, const float* q_gain, const float* k_gain, int n, int n_heads,
             int n_kv_heads, int head_dim, float eps, StreamHandle stream = nullptr);

}  // namespace kvheap::cuda
