// CPU SwiGLU and residual add.
#include "kernels/swiglu.hpp"

#include <cmath>

namespace kvheap::cpu {

void swiglu(float* gate, const float* up, long count) {
  for (long i = 0; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void residual_add(float* x, const float* delta, long count) {
  for (long i = 0; i < count; ++i) x[i] += delta[i];
}

}  // namespace kvheap::cpu
