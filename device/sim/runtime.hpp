// Internal bookkeeping shared by the simulator's CUDA runtime functions and its launcher: the
// per-host-thread last error, the live streams, the kernel attributes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace kvheap::sim {

/// \brief Records a failed call: sets the last error (cudaGetLastError) and the detail message
/// (last_error_detail) of the calling host thread; returns `error`.
cudaError_t api_fail(cudaError_t error, std::string detail);
/// \brief Records a successful call (clears the detail message); returns cudaSuccess.
cudaError_t api_ok();
/// \brief True for the default streams and for streams created and not yet destroyed.
bool is_live_stream(cudaStream_t stream);
/// \brief The dynamic shared memory a kernel may use: 48 KiB, or what cudaFuncSetAttribute set.
std::size_t max_dynamic_smem(const void* kernel);

}  // namespace kvheap::sim
