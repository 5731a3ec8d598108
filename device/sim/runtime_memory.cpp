// The memory half of the simulator's CUDA runtime subset: cudaMalloc/cudaFree, pinned host
// memory, cudaMemcpy/cudaMemset (all synchronous) and the symbol copies, with the real names and
// signatures from cuda_runtime_api.h so device-layer code is one source in both builds.
//
// Copies check what a GPU driver would and a little more: the direction against where the
// pointers really live, and that the device side stays inside its cudaMalloc block.
#include <cstdio>
#include <cstring>
#include <string>

#include "device/sim/counters.hpp"
#include "device/sim/memory.hpp"
#include "device/sim/ordering.hpp"
#include "device/sim/runtime.hpp"
#include "device/sim/sim.hpp"

namespace kvheap::sim {
namespace {

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "an unknown cudaMemcpyKind";
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// Checks one side of a copy; `want_device` is -1 when any memory will do.
std::string check_side(const char* role, const void* p, std::size_t count, int want_device) {
  const auto a = DeviceMemory::instance().find(p);
  const bool device = a && a->kind == MemoryKind::Device;
  if (device && a->freed) return std::string(role) + " " + hex(p) + " is freed device memory";
  if (want_device >= 0 && device != (want_device == 1)) {
    return std::string(role) + " " + hex(p) + " is " + (device ? "device" : "host") +
           " memory, not " + (want_device == 1 ? "device" : "host") + " memory";
  }
  if (device) {
    const std::size_t room =
        static_cast<std::size_t>(a->user + a->bytes - static_cast<const std::byte*>(p));
    if (count > room) {
      return std::string(role) + " " + hex(p) + " has " + std::to_string(room) +
             " bytes left in its cudaMalloc block of " + std::to_string(a->bytes) + " bytes";
    }
  }
  return {};
}

// Counts a copy by where its two sides really are (cudaMemcpyDefault included).
void count_copy(const void* dst, const void* src, std::size_t bytes) {
  const auto on_device = [](const void* p) {
    const auto a = DeviceMemory::instance().find(p);
    return a && a->kind == MemoryKind::Device;
  };
  const bool to_device = on_device(dst), from_device = on_device(src);
  const auto n = static_cast<long>(bytes);
  if (to_device && from_device)
    detail::count(detail::Count::DeviceCopy);
  else if (to_device)
    detail::count(detail::Count::Upload, n);
  else if (from_device)
    detail::count(detail::Count::Download, n);
}

cudaError_t copy(const char* api, void* dst, const void* src, std::size_t count,
                 cudaMemcpyKind kind, cudaStream_t stream) {
  if (count == 0) return api_ok();
  const std::string what =
      std::string(api) + " (" + kind_name(kind) + ") of " + std::to_string(count) + " bytes: ";
  if (dst == nullptr || src == nullptr)
    return api_fail(cudaErrorInvalidValue, what + "null pointer");
  int dst_device = -1;
  int src_device = -1;
  switch (kind) {
    case cudaMemcpyHostToHost:
      dst_device = 0;
      src_device = 0;
      break;
    case cudaMemcpyHostToDevice:
      dst_device = 1;
      src_device = 0;
      break;
    case cudaMemcpyDeviceToHost:
      dst_device = 0;
      src_device = 1;
      break;
    case cudaMemcpyDeviceToDevice:
      dst_device = 1;
      src_device = 1;
      break;
    case cudaMemcpyDefault: break;
    default: return api_fail(cudaErrorInvalidMemcpyDirection, what + "invalid direction");
  }
  if (auto why = check_side("destination", dst, count, dst_device); !why.empty()) {
    return api_fail(cudaErrorInvalidValue, what + why);
  }
  if (auto why = check_side("source", src, count, src_device); !why.empty()) {
    return api_fail(cudaErrorInvalidValue, what + why);
  }
  const Access uses[] = {{dst, true, "destination"}, {src, false, "source"}};
  if (auto why = ordering_operation(stream, api, uses); !why.empty())
    return api_fail(cudaErrorInvalidValue, what + why);
  ScopedOpen open_dst(dst);
  ScopedOpen open_src(src);
  std::memmove(dst, src, count);
  count_copy(dst, src, count);
  return api_ok();
}

cudaError_t fill(const char* api, void* dst, int value, std::size_t count, cudaStream_t stream) {
  if (count == 0) return api_ok();
  const std::string what = std::string(api) + " of " + std::to_string(count) + " bytes: ";
  if (auto why = check_side("destination", dst, count, 1); !why.empty()) {
    return api_fail(cudaErrorInvalidValue, what + why);
  }
  const Access uses[] = {{dst, true, "destination"}};
  if (auto why = ordering_operation(stream, api, uses); !why.empty())
    return api_fail(cudaErrorInvalidValue, what + why);
  ScopedOpen open_dst(dst);
  std::memset(dst, value, count);
  detail::count(detail::Count::DeviceCopy);
  return api_ok();
}

cudaError_t host_alloc(void** ptr, std::size_t size) {
  if (ptr == nullptr) return api_fail(cudaErrorInvalidValue, "cudaMallocHost: null output pointer");
  *ptr = nullptr;
  if (size == 0) return api_ok();
  std::string why;
  const cudaError_t e = DeviceMemory::instance().allocate(ptr, size, MemoryKind::Pinned, why);
  if (e == cudaSuccess) detail::count(detail::Count::Allocation);
  return e == cudaSuccess ? api_ok() : api_fail(e, why);
}

}  // namespace

PointerKind classify_pointer(const void* p) {
  const auto a = DeviceMemory::instance().find(p, /*include_end=*/true);
  if (!a) return PointerKind::Host;
  if (a->kind == MemoryKind::Pinned) return PointerKind::Pinned;
  return a->freed ? PointerKind::FreedDevice : PointerKind::Device;
}

std::size_t bytes_available(const void* p) {
  const auto a = DeviceMemory::instance().find(p, /*include_end=*/true);
  if (!a || a->freed) return 0;
  return static_cast<std::size_t>(a->user + a->bytes - static_cast<const std::byte*>(p));
}

}  // namespace kvheap::sim

using kvheap::sim::api_fail;
using kvheap::sim::api_ok;
using kvheap::sim::DeviceMemory;
using kvheap::sim::MemoryKind;

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (devPtr == nullptr) return api_fail(cudaErrorInvalidValue, "cudaMalloc: null output pointer");
  *devPtr = nullptr;
  if (size == 0) return api_ok();
  std::string why;
  const cudaError_t e = DeviceMemory::instance().allocate(devPtr, size, MemoryKind::Device, why);
  if (e == cudaSuccess) kvheap::sim::detail::count(kvheap::sim::detail::Count::Allocation);
  return e == cudaSuccess ? api_ok() : api_fail(e, why);
}

cudaError_t cudaFree(void* devPtr) {
  if (devPtr == nullptr) return api_ok();
  std::string why;
  kvheap::sim::ordering_host_waits_all();  // cudaFree waits for the device
  const cudaError_t e = DeviceMemory::instance().release(devPtr, MemoryKind::Device, why);
  if (e == cudaSuccess) kvheap::sim::detail::count(kvheap::sim::detail::Count::Free);
  if (e == cudaSuccess) kvheap::sim::ordering_freed(devPtr);
  return e == cudaSuccess ? api_ok() : api_fail(e, why);
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return kvheap::sim::host_alloc(ptr, size); }

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int /*flags*/) {
  return kvheap::sim::host_alloc(pHost, size);
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return api_ok();
  std::string why;
  kvheap::sim::ordering_host_waits_all();  // cudaFreeHost waits for the device
  const cudaError_t e = DeviceMemory::instance().release(ptr, MemoryKind::Pinned, why);
  if (e == cudaSuccess) kvheap::sim::detail::count(kvheap::sim::detail::Count::Free);
  if (e == cudaSuccess) kvheap::sim::ordering_freed(ptr);
  return e == cudaSuccess ? api_ok() : api_fail(e, why);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  // Synchronous on a GPU: the host waits for the device, as at any synchronisation.
  if (count > 0) kvheap::sim::detail::count(kvheap::sim::detail::Count::Sync);
  const cudaError_t e = kvheap::sim::copy("cudaMemcpy", dst, src, count, kind, nullptr);
  // The host waits for the default stream when the copy lands in host memory. A copy into device
  // memory may return before it lands (from pageable memory once staged, device to device at
  // once): only the default stream and the blocking streams are ordered after it.
  const bool to_host = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost ||
                       (kind == cudaMemcpyDefault &&
                        kvheap::sim::classify_pointer(dst) != kvheap::sim::PointerKind::Device);
  if (to_host) kvheap::sim::ordering_host_waits_stream(nullptr);
  return e;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (!kvheap::sim::is_live_stream(stream)) {
    return api_fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: stream is not live");
  }
  return kvheap::sim::copy("cudaMemcpyAsync", dst, src, count, kind, stream);
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return kvheap::sim::fill("cudaMemset", devPtr, value, count, nullptr);
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  if (!kvheap::sim::is_live_stream(stream)) {
    return api_fail(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: stream is not live");
  }
  return kvheap::sim::fill("cudaMemsetAsync", devPtr, value, count, stream);
}

// In the simulator a __device__ or __constant__ variable is an ordinary global, so its address
// is the symbol.
cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               cudaMemcpyKind kind) {
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost) {
    return api_fail(cudaErrorInvalidMemcpyDirection, "cudaMemcpyToSymbol: copies to the device");
  }
  if (symbol == nullptr || (src == nullptr && count > 0)) {
    return api_fail(cudaErrorInvalidSymbol, "cudaMemcpyToSymbol: null symbol or source");
  }
  kvheap::sim::ScopedOpen open_src(src);
  std::memmove(static_cast<std::byte*>(const_cast<void*>(symbol)) + offset, src, count);
  kvheap::sim::detail::count(kvheap::sim::detail::Count::Upload, static_cast<long>(count));
  return api_ok();
}

cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                 cudaMemcpyKind kind) {
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost) {
    return api_fail(cudaErrorInvalidMemcpyDirection,
                    "cudaMemcpyFromSymbol: copies from the device");
  }
  if (symbol == nullptr || (dst == nullptr && count > 0)) {
    return api_fail(cudaErrorInvalidSymbol, "cudaMemcpyFromSymbol: null symbol or destination");
  }
  kvheap::sim::ScopedOpen open_dst(dst);
  std::memmove(dst, static_cast<const std::byte*>(symbol) + offset, count);
  kvheap::sim::detail::count(kvheap::sim::detail::Count::Download, static_cast<long>(count));
  return api_ok();
}
