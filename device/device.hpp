// The device layer for host code: error checking, device query, streams and events. Same source
// in both CUDA builds: against the real CUDA runtime (KVHEAP_CUDA=real) or the CPU simulator of
// it (KVHEAP_CUDA=sim), which implements the same cuda* functions. Buffers are in
// device/buffers.hpp, kernel launches in device/launch.hpp, the GEMM in device/gemm.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.hpp"

/// \brief Evaluates a CUDA runtime call and throws kvheap::ResourceError naming the call, the
/// file:line and the CUDA error (plus the simulator's explanation, in the simulator) on failure.
#define KVHEAP_CUDA_CHECK(expr) ::kvheap::detail::cuda_check((expr), #expr, __FILE__, __LINE__)

namespace kvheap {

/// \brief A kernel launch failed: a configuration the device refuses, or (in the simulator) a
/// deadlock, trap or fault inside the kernel. The message names the kernel and the cause.
class LaunchError : public Error {
 public:
  using Error::Error;
};

namespace detail {
/// \brief Throws the ResourceError of KVHEAP_CUDA_CHECK.
[[noreturn]] void throw_cuda_error(cudaError_t error, const char* expr, const char* file, int line);
/// \brief The check behind KVHEAP_CUDA_CHECK.
inline void cuda_check(cudaError_t error, const char* expr, const char* file, int line) {
  if (error != cudaSuccess) throw_cuda_error(error, expr, file, line);
}
/// \brief True when KVHEAP_CUDA_SYNC=1: launches then synchronise, so an asynchronous kernel
/// fault is reported by the launch that caused it (real GPUs only; the simulator is synchronous).
bool sync_after_launch();
/// \brief A kernel's name as the compiler spells it, without anonymous-namespace qualifiers
/// ("{anonymous}::", nvcc's "_GLOBAL__N__<hash>::"), for messages.
std::string readable_kernel_name(std::string_view compiler_name);
/// \brief The LaunchError message: "kernel NAME failed: cudaErrorX (text): detail".
std::string launch_failure(std::string_view kernel, cudaError_t error, const std::string& detail);
}  // namespace detail

/// \brief True in the simulator build: timings mean nothing there, and benchmarks must refuse to
/// run or label their output.
constexpr bool is_simulator() noexcept {
#if defined(KVHEAP_SIM)
  return true;
#else
  return false;
#endif
}

/// \brief What a benchmark or report needs to know about a device.
struct DeviceInfo {
  std::string name;              ///< "NVIDIA H200" or "kvheap CPU simulator"
  int sm_count = 0;              ///< streaming multiprocessors (simulator: worker threads)
  std::size_t total_memory = 0;  ///< bytes of device memory
  int memory_clock_khz = 0;      ///< peak memory clock (0 when unknown, as in the simulator)
  int bus_width = 0;             ///< memory bus width in bits (0 when unknown)
  int sm_clock_khz = 0;          ///< peak SM clock (0 when unknown)
  std::size_t l2_bytes = 0;      ///< L2 cache size (0 when unknown, as in the simulator)
  int cc_major = 0;              ///< compute capability, e.g. 9.0
  int cc_minor = 0;              ///< minor part of the compute capability (the 0 of 9.0)
  bool is_simulator = false;     ///< true for the CPU simulator
};

/// \brief Number of usable CUDA devices; 0 (never an exception) when there is no driver or GPU.
int device_count() noexcept;

/// \brief Why device 0 cannot be used ("no CUDA device found: ..."), or nothing when it can.
/// Tests that need a GPU skip with this message.
std::optional<std::string> device_unavailable_reason();

/// \brief Properties of `device`; throws ResourceError when it does not exist.
DeviceInfo device_info(int device = 0);

/// \brief device_info(0), or throws ResourceError("no CUDA device found: <reason>").
DeviceInfo require_cuda_device();

/// \brief Throws ResourceError("<what> = N MB exceeds the device's free memory (F MB of T MB)")
/// when `bytes` is more than the current device has free now: a cache checks before it allocates,
/// so the error names the cache instead of a failed cudaMalloc.
void require_free_device_memory(std::size_t bytes, const std::string& what);

/// \brief An owned CUDA stream (in the simulator every stream is synchronous, and checked for the
/// order a GPU would keep: device/sim/ordering.hpp).
class Stream {
 public:
  /// \brief Creates a stream; throws ResourceError on failure.
  Stream();
  ~Stream();
  /// \brief Takes over `other`'s stream; `other` is left without one.
  Stream(Stream&& other) noexcept;
  /// \brief Destroys this stream, then takes over `other`'s; `other` is left without one.
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /// \brief The raw handle, for kvheap::launch and cuda* calls.
  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }
  /// \brief The raw handle, so a Stream can be passed wherever a cudaStream_t is expected.
  operator cudaStream_t() const noexcept { return stream_; }  // NOLINT: a handle, meant to convert
  /// \brief Waits until everything queued on the stream has finished.
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

/// \brief An owned CUDA event, for timing work on a stream or ordering work across streams.
class Event {
 public:
  /// \brief Creates an event; `timing` = false makes a cheaper event that cannot be timed.
  explicit Event(bool timing = true);
  ~Event();
  /// \brief Takes over `other`'s event; `other` is left without one.
  Event(Event&& other) noexcept;
  /// \brief Destroys this event, then takes over `other`'s; `other` is left without one.
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// \brief Records the event on `stream` (the default stream when null).
  void record(cudaStream_t stream = nullptr);
  /// \brief Waits until the work before the recording has finished.
  void synchronize() const;
  /// \brief Makes `stream`'s later work wait, on the device, for the work before the last
  /// recording (cudaStreamWaitEvent); the host does not wait.
  void order_before(cudaStream_t stream) const;
  /// \brief The raw handle.
  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

/// \brief A second stream, for work that may run on the device beside a stream's own: fork()
/// orders it after what was issued on that stream so far, join() orders what is issued on that
/// stream next after the work given to it in between. The host never waits.
///
/// It does not block with the legacy default stream (cudaStreamNonBlocking), so that work forked
/// from the default stream runs beside it, not after it: only the two events order them.
class SideStream {
 public:
  /// \brief Creates the stream and its two events; throws ResourceError on failure.
  SideStream();
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  /// \brief Orders this stream after everything issued on `main` so far; returns the stream,
  /// for the work that may run beside `main`'s next.
  cudaStream_t fork(cudaStream_t main);
  /// \brief Orders what is issued on `main` next after everything issued on this stream so far.
  void join(cudaStream_t main);
  /// \brief join() for a path that is already failing (a destructor during unwinding): errors
  /// are ignored, and cleared so that they are not blamed on a later call.
  void join_quietly(cudaStream_t main) noexcept;

 private:
  cudaStream_t stream_ = nullptr;
  Event forked_{false}, joined_{false};
};

/// \brief Milliseconds between two recorded events; waits for `stop` first.
float elapsed_ms(const Event& start, const Event& stop);

/// \brief Milliseconds between two events that have completed (a wait on `stop`, or on work
/// after it, has returned): no synchronisation of its own.
float elapsed_ms_completed(const Event& start, const Event& stop);

}  // namespace kvheap
