// The simulator's CUDA runtime subset, part one: errors, the simulated device and its
// properties, kernel attributes and occupancy (memory is in runtime_memory.cpp, streams and events
// in runtime_streams.cpp). Same names and signatures as cuda_runtime_api.h; nothing here links
// libcudart or needs a driver.
#include <cuda_occupancy.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "device/sim/block_runner.hpp"
#include "device/sim/memory.hpp"
#include "device/sim/counters.hpp"
#include "device/sim/ordering.hpp"
#include "device/sim/runtime.hpp"
#include "device/sim/sim.hpp"

namespace kvheap::sim {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local std::string t_detail;

std::mutex g_attributes_mutex;
std::map<const void*, std::size_t> g_max_dynamic_smem;  // set by cudaFuncSetAttribute

cudaError_t bad_device(int device) {
  return api_fail(cudaErrorInvalidDevice, "device " + std::to_string(device) +
                                              " does not exist; the simulator has device 0 only");
}

}  // namespace

cudaError_t api_fail(cudaError_t error, std::string detail) {
  t_last_error = error;
  t_detail = std::move(detail);
  return error;
}

cudaError_t api_ok() {
  t_detail.clear();
  return cudaSuccess;
}

const std::string& last_error_detail() { return t_detail; }

std::size_t max_dynamic_smem(const void* kernel) {
  std::lock_guard lock(g_attributes_mutex);
  auto it = g_max_dynamic_smem.find(kernel);
  return it != g_max_dynamic_smem.end() ? it->second : kDefaultDynamicSmem;
}

}  // namespace kvheap::sim

using kvheap::sim::api_fail;
using kvheap::sim::api_ok;

cudaError_t cudaGetLastError() {
  const cudaError_t e = kvheap::sim::t_last_error;
  kvheap::sim::t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return kvheap::sim::t_last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidSymbol: return "cudaErrorInvalidSymbol";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidSymbol: return "invalid device symbol";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    default: return "unrecognized error code";
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return api_fail(cudaErrorInvalidValue, "cudaGetDeviceCount: null pointer");
  *count = 1;
  return api_ok();
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? api_ok() : kvheap::sim::bad_device(device);
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return api_fail(cudaErrorInvalidValue, "cudaGetDevice: null pointer");
  *device = 0;
  return api_ok();
}

cudaError_t cudaDeviceSynchronize() {
  kvheap::sim::detail::count(kvheap::sim::detail::Count::Sync);
  kvheap::sim::ordering_host_waits_all();
  return api_ok();
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return api_fail(cudaErrorInvalidValue, "null pointer");
  *version = CUDART_VERSION;
  return api_ok();
}

cudaError_t cudaRuntimeGetVersion(int* version) { return cudaDriverGetVersion(version); }

// Limits of an sm_90 (H100/H200-class) GPU, so launches are refused where they would be there.
// Clocks and bus width are 0: the simulator has no memory system worth quoting.
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return api_fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: null");
  if (device != 0) return kvheap::sim::bad_device(device);
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, "kvheap CPU simulator", sizeof prop->name - 1);
  prop->totalGlobalMem = kvheap::sim::DeviceMemory::instance().capacity();
  prop->sharedMemPerBlock = kvheap::sim::kDefaultDynamicSmem;
  prop->sharedMemPerBlockOptin = kvheap::sim::kMaxDynamicSmemOptin;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->reservedSharedMemPerBlock = 1024;
  prop->regsPerBlock = 65536;
  prop->regsPerMultiprocessor = 65536;
  prop->warpSize = 32;
  prop->memPitch = SIZE_MAX;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 65536;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = kvheap::sim::worker_threads();
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->canMapHostMemory = 1;
  prop->unifiedAddressing = 1;
  return api_ok();
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return api_fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: null");
  cudaDeviceProp p;
  if (const cudaError_t e = cudaGetDeviceProperties(&p, device); e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.sharedMemPerBlockOptin);
      break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrClockRate:
    case cudaDevAttrMemoryClockRate:
    case cudaDevAttrGlobalMemoryBusWidth:
    case cudaDevAttrL2CacheSize: *value = 0; break;
    default:
      return api_fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute " +
                                                 std::to_string(static_cast<int>(attr)) +
                                                 " is not simulated");
  }
  return api_ok();
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return api_fail(cudaErrorInvalidValue, "null pointer");
  const auto& memory = kvheap::sim::DeviceMemory::instance();
  *total = memory.capacity();
  *free = *total - std::min(*total, memory.used());
  return api_ok();
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (func == nullptr) return api_fail(cudaErrorInvalidDeviceFunction, "null kernel");
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return api_ok();  // a hint
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) {
    return api_fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute " +
                                               std::to_string(static_cast<int>(attr)) +
                                               " is not simulated");
  }
  if (value < 0 || static_cast<std::size_t>(value) > kvheap::sim::kMaxDynamicSmemOptin) {
    return api_fail(cudaErrorInvalidValue,
                    "cudaFuncSetAttribute: " + std::to_string(value) +
                        " bytes of dynamic shared memory; a block may have at most 227 KiB");
  }
  std::lock_guard lock(kvheap::sim::g_attributes_mutex);
  kvheap::sim::g_max_dynamic_smem[func] = static_cast<std::size_t>(value);
  return api_ok();
}

// NVIDIA's occupancy calculator (cuda_occupancy.h, header-only) on the simulated sm_90. A kernel
// compiled as C++ has no register count, so it is taken to use the most registers a thread can
// have at this block size (255, or fewer where the block's threads would not fit the register
// file): the answer is the fewest blocks per SM that any kernel of this block size and dynamic
// shared memory gets on the GPU. Static shared memory is likewise unknown and counted as none.
// Flags (the caching override) change nothing on an sm_90.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* num_blocks,
                                                                   const void* func, int block_size,
                                                                   size_t dynamic_smem,
                                                                   unsigned int /*flags*/) {
  if (num_blocks == nullptr) return api_fail(cudaErrorInvalidValue, "occupancy: null pointer");
  if (func == nullptr) return api_fail(cudaErrorInvalidDeviceFunction, "occupancy: null kernel");
  cudaDeviceProp p;
  if (const cudaError_t e = cudaGetDeviceProperties(&p, 0); e != cudaSuccess) return e;
  if (block_size <= 0 || block_size > p.maxThreadsPerBlock) {
    return api_fail(cudaErrorInvalidValue, "occupancy: a block of " + std::to_string(block_size) +
                                               " threads; a block has 1 to 1024");
  }
  const cudaOccDeviceProp device(p);
  cudaOccFuncAttributes kernel;
  kernel.maxThreadsPerBlock = p.maxThreadsPerBlock;
  // Registers are allocated per warp in units of 256 (8 per thread), and a block's warps are
  // counted in fours (one per sub-partition) against the 64 K register file.
  const int warps = (block_size + 31) / 32;
  const int per_thread = p.regsPerBlock / (((warps + 3) / 4) * 4 * 32) / 8 * 8;
  kernel.numRegs = std::min(255, per_thread);
  kernel.sharedSizeBytes = 0;
  kernel.maxDynamicSharedSizeBytes = kvheap::sim::max_dynamic_smem(func);
  kernel.shmemLimitConfig = kernel.maxDynamicSharedSizeBytes > kvheap::sim::kDefaultDynamicSmem
                                ? FUNC_SHMEM_LIMIT_OPTIN
                                : FUNC_SHMEM_LIMIT_DEFAULT;
  const cudaOccDeviceState state;
  cudaOccResult result{};
  if (cudaOccMaxActiveBlocksPerMultiprocessor(&result, &device, &kernel, &state, block_size,
                                              dynamic_smem) != CUDA_OCC_SUCCESS) {
    return api_fail(cudaErrorInvalidValue, "occupancy: the calculator refused the launch shape");
  }
  *num_blocks = result.activeBlocksPerMultiprocessor;
  return api_ok();
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* num_blocks, const void* func,
                                                          int block_size, size_t dynamic_smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num_blocks, func, block_size,
                                                                dynamic_smem, 0);
}
