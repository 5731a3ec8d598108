// CPU matrix products for the forward pass (Eigen inside, OpenMP across output columns).
#include "kernels/matmul.hpp"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>

namespace kvheap::cpu {

namespace {
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
}  // namespace

void matmul(float* out, const float* x, const float* w, int n, int in_dim, int out_dim) {
  Eigen::Map<const RowMajor> X(x, n, in_dim);        // [n, in_dim]
  Eigen::Map<const RowMajor> W(w, out_dim, in_dim);  // [out_dim, in_dim]
  Eigen::Map<RowMajor> Y(out, n, out_dim);           // [n, out_dim]
  // Chunks are multiples of 16 rows so every thread's slice starts on a 64-byte boundary of the
  // output and the vectorised dot products see whole SIMD lanes.
  constexpr int kAlign = 16;
  // Below ~256K multiply-adds a parallel region costs more than it saves (and far more when the
  // cores are shared with other processes), so small models run single-threaded.
  const bool parallel = static_cast<long>(n) * in_dim * out_dim >= (1L << 18);
#pragma omp parallel if (parallel)
  {
    const int nt = omp_get_num_threads();
    const int t = omp_get_thread_num();
    const int per = ((out_dim + nt - 1) / nt + kAlign - 1) / kAlign * kAlign;
    const int begin = std::min(out_dim, t * per);
    const int end = std::min(out_dim, begin + per);
    if (end > begin) {
      if (n == 1) {
        // y^T = W_slice x^T: a row-major GEMV, one contiguous pass over the slice.
        Y.row(0).segment(begin, end - begin).noalias() =
            (W.middleRows(begin, end - begin) * X.row(0).transpose()).transpose();
      } else {
        Y.middleCols(begin, end - begin).noalias() =
            X * W.middleRows(begin, end - begin).transpose();
      }
    }
  }
}

void add_bias(float* out, const float* bias, int n, int dim) {
  if (bias == nullptr) return;
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < dim; ++i) out[static_cast<long>(r) * dim + i] += bias[i];
}

}  // namespace kvheap::cpu
