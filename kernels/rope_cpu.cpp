// CPU RoPE.
#include "kernels/rope.hpp"

#include <cmath>

#include "kernels/cpu_threads.hpp"

namespace kvheap::cpu {

void rope(float* x, const int* pos, int n, int n_heads, int head_dim, const float* inv_freq,
          bool interleaved) {
  const int half = head_dim / 2;
  const bool parallel = static_cast<long>(n) * n_heads * head_dim >= kParallelElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos[r]) * inv_freq[i];
      const float c = std::cos(angle);
      const float s = std::sin(angle);
      for (int h = 0; h < n_heads; ++h) {
        float* head = x + (static_cast<long>(r) * n_heads + h) * head_dim;
        const int a = interleaved ? 2 * i : i;
        const int b = interleaved ? 2 * i + 1 : i + half;
        const float x0 = head[a];
        const float x1 = head[b];
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
      }
    }
  }
}

}  // namespace kvheap::cpu
