// RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, per row.
#pragma once

#include "kernels/cuda_stream.hpp"

namespace kvheap::cpu {

/// \brief out[n, dim] = rmsnorm(x[n, dim]) * weight[dim]; out may alias x.
///
/// The mean of squares is accumulated in fp32 left to right, the order every kvheap backend uses,
/// so the CUDA twin can match it within rounding.
void rmsnorm(float* out, const float* x, const float* weight, int n, int dim, float eps);

}  // namespace kvheap::cpu

namespace kvheap::cuda {

/// \brief CUDA twin of cpu::rmsnorm on device memory (rmsnorm.cu): one block per row, the mean of
/// squares summed in fp32 through warp shuffles and shared memory; out may alias x.
/// \param out    [n, dim] written
/// \param x      [n, dim]
/// \param weight [dim] gain
void rmsnorm(float* out, const float* x, const float* weight, int n, int dim, float eps,
             StreamHandle stream = nullptr);

}  // namespace kvheap::cuda
