// SwiGLU: the gated activation between the MLP's up and down projections.
#pragma once

namespace kvheap::cpu {

/// \brief gate[n, hidden] = silu(gate) * up[n, hidden], silu(x) = x / (1 + e^-x); in place.
void swiglu(float* gate, const float* up, long count);

/// \brief x[count] += delta[count]: the residual connection.
void residual_add(float* x, const float* delta, long count);

}  // namespace kvheap::cpu
