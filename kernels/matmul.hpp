// Matrix products against row-major weight matrices: out = x W^T.
#pragma once

namespace kvheap::cpu {

/// \brief Batches of up to this many rows take matmul's dot-product path; longer ones Eigen's
/// matrix product (see kernels/matmul_cpu.cpp for the measurements behind the number).
inline constexpr int kDotRows = 16;

/// \brief Products of fewer multiply-adds (n x in_dim x out_dim) run on one thread: below that
/// a parallel region costs more than it saves, and far more when other processes share the cores.
inline constexpr long kParallelMacs = 1L << 18;

/// \brief out[n, out_dim] = x[n, in_dim] * W[out_dim, in_dim]^T, split over threads by output
/// columns. out must not overlap x or w.
///
/// Decode is a matrix-vector product whose cost is reading W once; splitting W's rows across
/// threads lets every core stream its own slice, which is what reaches the memory bandwidth. A
/// batch of up to kDotRows rows reads each weight row once for all of them. Each output element
/// is a single dot product whose order does not depend on the thread count, so results are
/// identical for any number of threads; up to kDotRows rows, a row's outputs are also bitwise
/// the same whatever other rows share its batch.
void matmul(float* out, const float* x, const float* w, int n, int in_dim, int out_dim);

/// \brief out[n, dim] += bias[dim] broadcast over rows (no-op when bias is null).
void add_bias(float* out, const float* bias, int n, int dim);

}  // namespace kvheap::cpu
