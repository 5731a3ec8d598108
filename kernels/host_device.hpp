// KVHEAP_HD marks functions that run on both host and device: __host__ __device__ under nvcc,
// nothing in CPU builds and in the simulator (where kernels are host code).
#pragma once

#if defined(__CUDACC__)
#define KVHEAP_HD __host__ __device__ __forceinline__
#else
#define KVHEAP_HD inline
#endif
