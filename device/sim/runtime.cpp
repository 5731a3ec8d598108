// The rest of the simulator's CUDA runtime subset: errors, the simulated device and its
// properties, streams and events (everything is synchronous), kernel attributes. Same names and
// signatures as cuda_runtime_api.h; nothing here links libcudart or needs a driver.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "device/sim/block_runner.hpp"
#include "device/sim/memory.hpp"
#include "device/sim/runtime.hpp"
#include "device/sim/sim.hpp"

/// A simulated stream: a handle only, since every operation completes before it returns.
struct CUstream_st {
  unsigned flags = 0;
};

/// A simulated event: the host time at which it was recorded.
struct CUevent_st {
  unsigned flags = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point when{};
};

namespace kvheap::sim {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local std::string t_detail;

std::mutex g_handles_mutex;
std::set<const void*> g_streams;
std::set<const void*> g_events;
std::map<const void*, std::size_t> g_max_dynamic_smem;

bool live_event(cudaEvent_t e) {
  std::lock_guard lock(g_handles_mutex);
  return g_events.count(e) != 0;
}

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

bool is_live_stream(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return true;
  std::lock_guard lock(g_handles_mutex);
  return g_streams.count(stream) != 0;
}

std::size_t max_dynamic_smem(const void* kernel) {
  std::lock_guard lock(g_handles_mutex);
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

cudaError_t cudaDeviceSynchronize() { return api_ok(); }

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
  std::lock_guard lock(kvheap::sim::g_handles_mutex);
  kvheap::sim::g_max_dynamic_smem[func] = static_cast<std::size_t>(value);
  return api_ok();
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr) return api_fail(cudaErrorInvalidValue, "cudaStreamCreate: null pointer");
  *stream = new CUstream_st{flags};
  std::lock_guard lock(kvheap::sim::g_handles_mutex);
  kvheap::sim::g_streams.insert(*stream);
  return api_ok();
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  {
    std::lock_guard lock(kvheap::sim::g_handles_mutex);
    if (kvheap::sim::g_streams.erase(stream) == 0) {
      return api_fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
    }
  }
  delete stream;
  return api_ok();
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!kvheap::sim::is_live_stream(stream)) {
    return api_fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: not a live stream");
  }
  return api_ok();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return api_fail(cudaErrorInvalidValue, "cudaEventCreate: null pointer");
  *event = new CUevent_st{flags, false, {}};
  std::lock_guard lock(kvheap::sim::g_handles_mutex);
  kvheap::sim::g_events.insert(*event);
  return api_ok();
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  {
    std::lock_guard lock(kvheap::sim::g_handles_mutex);
    if (kvheap::sim::g_events.erase(event) == 0) {
      return api_fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: not a live event");
    }
  }
  delete event;
  return api_ok();
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!kvheap::sim::live_event(event) || !kvheap::sim::is_live_stream(stream)) {
    return api_fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: not a live event/stream");
  }
  event->recorded = true;
  event->when = std::chrono::steady_clock::now();
  return api_ok();
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!kvheap::sim::live_event(event)) {
    return api_fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: not a live event");
  }
  return api_ok();
}

cudaError_t cudaEventQuery(cudaEvent_t event) { return cudaEventSynchronize(event); }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return api_fail(cudaErrorInvalidValue, "cudaEventElapsedTime: null pointer");
  if (!kvheap::sim::live_event(start) || !kvheap::sim::live_event(end) || !start->recorded ||
      !end->recorded || ((start->flags | end->flags) & cudaEventDisableTiming) != 0) {
    return api_fail(cudaErrorInvalidResourceHandle,
                    "cudaEventElapsedTime: both events must be live, recorded, and timing");
  }
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return api_ok();
}
