// Rotary position embedding (RoPE), in both pairings that checkpoints use.
#pragma once

#include "kernels/cuda_stream.hpp"

namespace kvheap::cpu {

/// \brief Rotates x[n, n_heads, head_dim] in place by angle pos[r] * inv_freq[i].
///
/// interleaved = true rotates pairs (2i, 2i+1) (llama2.c); false rotates halves (i, i + head_dim/2)
/// (Hugging Face). inv_freq has head_dim/2 entries, already scaled (llama3 rope_scaling).
/// The angle is computed in fp32 as pos * inv_freq, then cos and sin, the way the reference
/// implementations of both checkpoint families do it.
void rope(float* x, const int* pos, int n, int n_heads, int head_dim, const float* inv_freq,
          bool interleaved);

}  // namespace kvheap::cpu

namespace kvheap::cuda {

/// \brief CUDA twin of cpu::rope on device memory (rope.cu): one thread per (row, head, pair),
/// the angle as float(pos) * inv_freq[i] and full-precision cosf/sinf, like the twin.
/// \param x        [n, n_heads, head_dim] rotated in place
/// \param pos      [n] position of each row
/// \param inv_freq [head_dim / 2]
void rope(float* x, const int* pos, int n, int n_heads, int head_dim, const float* inv_freq,
          bool interleaved, StreamHandle stream = nullptr);

}  // namespace kvheap::cuda
