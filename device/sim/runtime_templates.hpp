// The C++ conveniences that cuda_runtime.h offers only to .cu files (it hides them from a plain
// host compiler): the kernel- and symbol-taking overloads of cudaFuncSetAttribute and
// cudaMemcpyTo/FromSymbol. The simulator compiles .cu files with the host compiler, so it
// supplies them, forwarding to the C functions as nvcc's versions do. Included by
// device/cuda_compat.hpp under KVHEAP_SIM.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

/// \brief cudaFuncSetAttribute for a kernel (a function pointer), as nvcc's cuda_runtime.h has it.
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}

/// \brief cudaMemcpyToSymbol for a __device__ / __constant__ variable.
template <class T>
inline cudaError_t cudaMemcpyToSymbol(const T& symbol, const void* src, std::size_t count,
                                      std::size_t offset = 0,
                                      cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
  return ::cudaMemcpyToSymbol(static_cast<const void*>(&symbol), src, count, offset, kind);
}

/// \brief cudaMemcpyFromSymbol for a __device__ / __constant__ variable.
template <class T>
inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, std::size_t count,
                                        std::size_t offset = 0,
                                        cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
  return ::cudaMemcpyFromSymbol(dst, static_cast<const void*>(&symbol), count, offset, kind);
}
