// CPU per-head q/k RMSNorm: RMSNorm over rows of head_dim.
#include "kernels/qk_norm.hpp"

#include "kernels/rmsnorm.hpp"

namespace kvheap::cpu {

void qk_norm(float* q, float* k, const float* q_gain, const float* k_gain, int n, int n_heads,
             int n_kv_heads, int head_dim, float eps) {
  rmsnorm(q, q, q_gain, n * n_heads, head_dim, eps);
  rmsnorm(k, k, k_gain, n * n_kv_heads, head_dim, eps);
}

}  // namespace kvheap::cpu
