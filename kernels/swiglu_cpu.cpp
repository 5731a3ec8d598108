// CPU SwiGLU and residual add.
#include "kernels/swiglu.hpp"

#include <cmath>

#include "kernels/cpu_threads.hpp"

namespace kvheap::cpu {

void swiglu(float* gate, const float* up, long count) {
#pragma omp parallel for schedule(static) if (count >= kParallelElements)
  for (long i = 0; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void residual_add(float* x, const float* delta, long count) {
#pragma omp parallel for schedule(static) if (count >= kParallelElements)
  for (long i = 0; i < count; ++i) x[i] += delta[i];
}

}  // namespace kvheap::cpu
