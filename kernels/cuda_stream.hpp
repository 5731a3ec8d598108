// The CUDA stream type for the kernel interface headers, without including any CUDA header.
//
// Each kernel header (rmsnorm.hpp, rope.hpp, ...) declares the CPU twin and the host wrapper of
// the CUDA kernel side by side. CPU-only builds (KVHEAP_CUDA=off) include those headers too, on
// machines that may have no CUDA toolkit, so the wrappers name the stream through this forward
// declaration: the runtime's cudaStream_t is exactly `CUstream_st*`, so callers pass one as is.
#pragma once

struct CUstream_st;  // opaque; defined by the CUDA driver

namespace kvheap::cuda {

/// \brief A CUDA stream, the same type as cudaStream_t; null means the default stream.
using StreamHandle = ::CUstream_st*;

}  // namespace kvheap::cuda
