// CPU matrix products for the forward pass: OpenMP across output columns, and inside each thread
// either register-blocked dot products (batches of up to kDotRows rows) or Eigen's matrix product.
//
// A decode step's cost is reading the weights once, and Eigen's product first copies ("packs")
// the weight slice, which for a handful of rows costs more than the product itself; the dot-product
// path reads each weight row once and reuses it for every row of the batch. Longer batches
// (prompts) go to Eigen, whose packing then pays for itself (docs/pages/cpu_twin.md has the
// measurements, and what a batch-invariant product would need).
//
// Every output element of the dot-product path is one dot product whose order is fixed by
// in_dim alone: element d goes to lane d % P of one packet accumulator (P floats per packet,
// multiply-adds through Eigen's pmadd, an FMA where the target has one), a zero-padded last
// packet takes the tail, and Eigen's predux sums the lanes. So a row's outputs are bitwise the
// same whatever else is in the batch (up to kDotRows rows) and whatever the thread count.
#include "kernels/matmul.hpp"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>

namespace kvheap::cpu {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Packet = Eigen::internal::packet_traits<float>::type;
constexpr int kP = Eigen::internal::packet_traits<float>::size;  // floats per packet
constexpr int kW = 4;  // weight rows per block: each loaded x packet serves four
// Batch rows per block: with 32 vector registers 16 accumulators and the loaded packets fit;
// with 16, eight do.
constexpr int kX = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32 ? 4 : 2;

/// y[c * ldy + r] = x_c . w_r for R weight rows and C batch rows, each a dense [in_dim] row (x_c at
/// x + c * in_dim, w_r at w + r * in_dim): R x C packet accumulators walk in_dim together.
template <int R, int C>
void dot_block(const float* x, const float* w, int in_dim, float* y, long ldy) {
  using Eigen::internal::ploadu;
  using Eigen::internal::pmadd;
  Packet acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = Eigen::internal::pset1<Packet>(0.0f);
  // One step: the packets at w_r + d and x_c + d (wt and xt say where they are read from).
  const auto step = [&](auto wt, auto xt) {
    Packet wp[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wp[r] = wt(r);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const Packet xp = xt(c);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = pmadd(wp[r], xp, acc[r][c]);
    }
  };
  const long ld = in_dim;
  int d = 0;
  for (; d + kP <= in_dim; d += kP)
    step([&](int r) { return ploadu<Packet>(w + r * ld + d); },
         [&](int c) { return ploadu<Packet>(x + c * ld + d); });
  if (d < in_dim) {  // the tail, zero-padded to a whole packet: 0 x 0 adds nothing
    std::array<std::array<float, kP>, R> wt{};
    std::array<std::array<float, kP>, C> xt{};
    for (int r = 0; r < R; ++r) std::copy(w + r * ld + d, w + r * ld + in_dim, wt[r].begin());
    for (int c = 0; c < C; ++c) std::copy(x + c * ld + d, x + c * ld + in_dim, xt[c].begin());
    step([&](int r) { return ploadu<Packet>(wt[r].data()); },
         [&](int c) { return ploadu<Packet>(xt[c].data()); });
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[c * ldy + r] = Eigen::internal::predux(acc[r][c]);
}

/// y[:, r] for R weight rows and every batch row: kX batch rows at a time, then fewer.
template <int R>
void dot_rows(const float* x, int n, const float* w, int in_dim, float* y, long ldy) {
  const long ld = in_dim;
  int i = 0;
  for (; i + kX <= n; i += kX) dot_block<R, kX>(x + i * ld, w, in_dim, y + i * ldy, ldy);
  for (; i + 2 <= n; i += 2) dot_block<R, 2>(x + i * ld, w, in_dim, y + i * ldy, ldy);
  for (; i < n; ++i) dot_block<R, 1>(x + i * ld, w, in_dim, y + i * ldy, ldy);
}

}  // namespace

void matmul(float* out, const float* x, const float* w, int n, int in_dim, int out_dim) {
  Eigen::Map<const RowMajor> X(x, n, in_dim);        // [n, in_dim]
  Eigen::Map<const RowMajor> W(w, out_dim, in_dim);  // [out_dim, in_dim]
  Eigen::Map<RowMajor> Y(out, n, out_dim);           // [n, out_dim]
  // Slices are multiples of 16 output columns, so that no two threads write one 64-byte line.
  constexpr int kAlign = 16;
  const bool parallel = static_cast<long>(n) * in_dim * out_dim >= kParallelMacs;
#pragma omp parallel if (parallel)
  {
    const int nt = omp_get_num_threads();
    const int t = omp_get_thread_num();
    const int per = ((out_dim + nt - 1) / nt + kAlign - 1) / kAlign * kAlign;
    const int begin = std::min(out_dim, t * per);
    const int end = std::min(out_dim, begin + per);
    if (end > begin && n <= kDotRows) {
      int j = begin;
      if (n == 1)  // one batch row: eight weight rows at a time, enough multiply-adds in flight
        for (; j + 2 * kW <= end; j += 2 * kW)
          dot_block<2 * kW, 1>(x, w + static_cast<long>(j) * in_dim, in_dim, out + j, out_dim);
      for (; j + kW <= end; j += kW)
        dot_rows<kW>(x, n, w + static_cast<long>(j) * in_dim, in_dim, out + j, out_dim);
      for (; j < end; ++j)
        dot_rows<1>(x, n, w + static_cast<long>(j) * in_dim, in_dim, out + j, out_dim);
    } else if (end > begin) {
      Y.middleCols(begin, end - begin).noalias() = X * W.middleRows(begin, end - begin).transpose();
    }
  }
}

void add_bias(float* out, const float* bias, int n, int dim) {
  if (bias == nullptr) return;
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < dim; ++i) out[static_cast<long>(r) * dim + i] += bias[i];
}

}  // namespace kvheap::cpu
