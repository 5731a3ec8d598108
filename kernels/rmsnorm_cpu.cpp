// CPU RMSNorm.
#include "kernels/rmsnorm.hpp"

#include <cmath>

#include "kernels/cpu_threads.hpp"

namespace kvheap::cpu {

void rmsnorm(float* out, const float* x, const float* weight, int n, int dim, float eps) {
  const bool parallel = static_cast<long>(n) * dim >= kParallelElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int r = 0; r < n; ++r) {
    const float* xr = x + static_cast<long>(r) * dim;
    float* yr = out + static_cast<long>(r) * dim;
    float ss = 0.0f;
    for (int i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

}  // namespace kvheap::cpu
