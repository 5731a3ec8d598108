// Streams and events of the simulator's CUDA runtime subset. Every operation completes before
// it returns, so a stream is a handle to validate, and an event is the host time at which it was
// recorded (elapsed times are wall-clock times of the host, meaningless as GPU timings). Both also
// tell the ordering bookkeeping (ordering.hpp) what a GPU would order, and what it would not.
#include <chrono>
#include <mutex>
#include <set>

#include "device/sim/counters.hpp"
#include "device/sim/ordering.hpp"
#include "device/sim/runtime.hpp"

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

std::mutex g_handles_mutex;
std::set<const void*> g_streams;
std::set<const void*> g_events;

bool live_event(cudaEvent_t e) {
  std::lock_guard lock(g_handles_mutex);
  return g_events.count(e) != 0;
}

}  // namespace

bool is_live_stream(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return true;
  std::lock_guard lock(g_handles_mutex);
  return g_streams.count(stream) != 0;
}

}  // namespace kvheap::sim

using kvheap::sim::api_fail;
using kvheap::sim::api_ok;

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr) return api_fail(cudaErrorInvalidValue, "cudaStreamCreate: null pointer");
  *stream = new CUstream_st{flags};
  kvheap::sim::ordering_stream_created(*stream, flags);
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
  kvheap::sim::ordering_stream_destroyed(stream);
  delete stream;
  return api_ok();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (!kvheap::sim::is_live_stream(stream)) {
    return api_fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery: not a live stream");
  }
  kvheap::sim::ordering_host_waits_stream(stream);  // the host now knows the stream is done
  return api_ok();                                  // every operation has completed
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!kvheap::sim::is_live_stream(stream)) {
    return api_fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: not a live stream");
  }
  kvheap::sim::detail::count(kvheap::sim::detail::Count::Sync);
  kvheap::sim::ordering_host_waits_stream(stream);
  return api_ok();
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (!kvheap::sim::is_live_stream(stream) || !kvheap::sim::live_event(event)) {
    return api_fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: not a live stream/event");
  }
  if (flags != 0) return api_fail(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags must be 0");
  kvheap::sim::ordering_stream_waits(stream, event);
  return api_ok();
}

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
  kvheap::sim::ordering_event_destroyed(event);
  delete event;
  return api_ok();
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!kvheap::sim::live_event(event) || !kvheap::sim::is_live_stream(stream)) {
    return api_fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: not a live event/stream");
  }
  event->recorded = true;
  event->when = std::chrono::steady_clock::now();
  kvheap::sim::ordering_event_recorded(event, stream);
  return api_ok();
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!kvheap::sim::live_event(event)) {
    return api_fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: not a live event");
  }
  kvheap::sim::ordering_host_waits_event(event);  // the host now knows that work is done
  return api_ok();                                // the work before it has completed
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!kvheap::sim::live_event(event)) {
    return api_fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: not a live event");
  }
  kvheap::sim::detail::count(kvheap::sim::detail::Count::Sync);
  kvheap::sim::ordering_host_waits_event(event);
  return api_ok();
}

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
