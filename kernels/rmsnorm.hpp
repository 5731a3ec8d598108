// RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, per row.
#pragma once

namespace kvheap::cpu {

/// \brief out[n, dim] = rmsnorm(x[n, dim]) * weight[dim]; out may alias x.
///
/// The mean of squares is accumulated in fp32 left to right, the order every kvheap backend uses,
/// so the CUDA twin can match it within rounding.
void rmsnorm(float* out, const float* x, const float* weight, int n, int dim, float eps);

}  // namespace kvheap::cpu
