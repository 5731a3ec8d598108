// SwiGLU: the gated activation between the MLP's up and down projections.
#pragma once

#include "kernels/cuda_stream.hpp"

namespace kvheap::cpu {

/// \brief gate[n, hidden] = silu(gate) * up[n, hidden], silu(x) = x / (1 + e^-x); in place.
void swiglu(float* gate, const float* up, long count);

/// \brief x[count] += delta[count]: the residual connection.
void residual_add(float* x, const float* delta, long count);

}  // namespace kvheap::cpu

namespace kvheap::cuda {

/// \brief CUDA twin of cpu::swiglu on device memory (swiglu.cu), in place.
/// \param gate [count] becomes silu(gate) * up
/// \param up   [count]
void swiglu(float* gate, const float* up, long count, StreamHandle stream = nullptr);

/// \brief CUDA twin of cpu::residual_add: x[count] += delta[count] on device memory.
void residual_add(float* x, const float* delta, long count, StreamHandle stream = nullptr);

}  // namespace kvheap::cuda
