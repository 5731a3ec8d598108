// The device layer for host code (see device.hpp): error checks, device query, streams, events.
// Compiled by the host compiler in both builds; only the simulator's extra error details differ.
#include "device/device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "device/gemm.hpp"

#if defined(KVHEAP_SIM)
#include "device/sim/sim.hpp"
#endif

namespace kvheap {
namespace detail {
namespace {

std::string error_text(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + " (" + cudaGetErrorString(error) + ")";
}

}  // namespace

void throw_cuda_error(cudaError_t error, const char* expr, const char* file, int line) {
  std::string message = std::string(file) + ":" + std::to_string(line) + ": " + expr +
                        " failed: " + error_text(error);
#if defined(KVHEAP_SIM)
  if (const std::string& why = sim::last_error_detail(); !why.empty()) message += ": " + why;
#endif
  // The runtime keeps a failed call's error until it is read: left there, a caller that catches
  // this exception and goes on would see it again at the next launch's check, blamed on that
  // kernel. (Sticky errors, a kernel fault, stay whatever is read.)
  (void)cudaGetLastError();
  throw ResourceError(message);
}

bool sync_after_launch() {
  static const bool sync = [] {
    const char* v = std::getenv("KVHEAP_CUDA_SYNC");
    return v != nullptr && std::string(v) == "1";
  }();
  return sync;
}

std::string readable_kernel_name(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  while (!name.empty()) {
    // Drop a qualifier that names an anonymous namespace, keep everything else.
    const bool anonymous = name.starts_with("{anonymous}::") ||
                           name.starts_with("(anonymous namespace)::") ||
                           name.starts_with("_GLOBAL__N_");
    const std::size_t end = name.find("::");
    if (anonymous && end != std::string_view::npos) {
      name.remove_prefix(end + 2);
      continue;
    }
    // Copy up to and including the next "::" (or a template bracket, whose arguments may hold
    // qualifiers of their own).
    std::size_t stop = name.find_first_of(":<,> ");
    if (stop == std::string_view::npos) stop = name.size() - 1;
    if (name[stop] == ':' && stop + 1 < name.size() && name[stop + 1] == ':') ++stop;
    out.append(name.substr(0, stop + 1));
    name.remove_prefix(stop + 1);
  }
  return out;
}

std::string launch_failure(std::string_view kernel, cudaError_t error, const std::string& detail) {
  return "kernel " + readable_kernel_name(kernel) + " failed: " + error_text(error) + ": " + detail;
}

void check_gemm_shape(GemmShape shape) {
  if (shape.m < 0 || shape.n < 0 || shape.k < 0) {
    throw InputError("gemm: negative size m=" + std::to_string(shape.m) +
                     " n=" + std::to_string(shape.n) + " k=" + std::to_string(shape.k));
  }
}

}  // namespace detail

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // do not leave the failure for the next check to find
    return 0;
  }
  return n;
}

std::optional<std::string> device_unavailable_reason() {
  int n = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) {
    (void)cudaGetLastError();
    return "no CUDA device found: " + detail::error_text(e);
  }
  if (n == 0) return std::string("no CUDA device found: the driver reports 0 devices");
  return std::nullopt;
}

DeviceInfo device_info(int device) {
  cudaDeviceProp prop{};
  KVHEAP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo info;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  info.bus_width = prop.memoryBusWidth;
  info.l2_bytes = static_cast<std::size_t>(std::max(prop.l2CacheSize, 0));
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  // Clocks left cudaDeviceProp in CUDA 13; the attributes exist in every version.
  KVHEAP_CUDA_CHECK(
      cudaDeviceGetAttribute(&info.memory_clock_khz, cudaDevAttrMemoryClockRate, device));
  KVHEAP_CUDA_CHECK(cudaDeviceGetAttribute(&info.sm_clock_khz, cudaDevAttrClockRate, device));
  info.is_simulator = is_simulator();
  return info;
}

DeviceInfo require_cuda_device() {
  if (auto why = device_unavailable_reason()) throw ResourceError(*why);
  return device_info(0);
}

void require_free_device_memory(std::size_t bytes, const std::string& what) {
  std::size_t free_bytes = 0, total_bytes = 0;
  KVHEAP_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (bytes > free_bytes)
    throw ResourceError(
        fmt::format("{} = {:.3f} MB exceeds the device's free memory ({:.3f} MB of {:.3f} MB)",
                    what, bytes / 1e6, free_bytes / 1e6, total_bytes / 1e6));
}

Stream::Stream() { KVHEAP_CUDA_CHECK(cudaStreamCreate(&stream_)); }

Stream::~Stream() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const { KVHEAP_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

SideStream::SideStream() {
  KVHEAP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

SideStream::~SideStream() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

cudaStream_t SideStream::fork(cudaStream_t main) {
  forked_.record(main);
  forked_.order_before(stream_);
  return stream_;
}

void SideStream::join(cudaStream_t main) {
  joined_.record(stream_);
  joined_.order_before(main);
}

void SideStream::join_quietly(cudaStream_t main) noexcept {
  if (cudaEventRecord(joined_.get(), stream_) == cudaSuccess)
    (void)cudaStreamWaitEvent(main, joined_.get(), 0);
  (void)cudaGetLastError();
}

Event::Event(bool timing) {
  KVHEAP_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(cudaStream_t stream) { KVHEAP_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void Event::synchronize() const { KVHEAP_CUDA_CHECK(cudaEventSynchronize(event_)); }

void Event::order_before(cudaStream_t stream) const {
  KVHEAP_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

float elapsed_ms(const Event& start, const Event& stop) {
  stop.synchronize();
  return elapsed_ms_completed(start, stop);
}

float elapsed_ms_completed(const Event& start, const Event& stop) {
  float ms = 0.0f;
  KVHEAP_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

}  // namespace kvheap
