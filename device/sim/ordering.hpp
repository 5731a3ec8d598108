// What a GPU may run at the same time: the simulator runs every operation before the call
// returns, so two kernels on different streams never overlap here, and a missing event between
// them would go unseen until a GPU ran them in the other order. This bookkeeping sees it anyway.
//
// Each stream keeps a vector clock: for every stream, the last of its operations known to come
// before the stream's next one. An operation ticks its stream's own entry; recording an event
// copies the stream's clock into the event, and cudaStreamWaitEvent joins the event's clock into
// the waiting stream's. The legacy default stream and the blocking streams join each other's
// clocks, as CUDA orders them, and a host synchronisation orders everything it waited for before
// every later operation. Every device allocation remembers its last writer and, per stream, its
// last reader since. An operation that writes an allocation must come after both; one that reads
// it, after the writer. Otherwise the two could overlap on a GPU, and the operation fails with a
// message naming both.
//
// A kernel reads what it takes through a pointer to const and may write what it takes through a
// pointer to non-const; pointers inside structures are not seen.
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <string>
#include <string_view>

namespace kvheap::sim {

/// \brief One pointer an operation uses.
struct Access {
  const void* ptr = nullptr;  ///< anything; only device and pinned allocations are tracked
  bool writes = false;        ///< may write (else only reads)
  std::string_view what;      ///< for messages: "argument 3", "destination"
};

/// \brief A stream created with `flags` (cudaStreamNonBlocking: not ordered with the legacy one).
void ordering_stream_created(cudaStream_t stream, unsigned flags);
/// \brief A stream destroyed: its handle may come back for another stream.
void ordering_stream_destroyed(cudaStream_t stream);
/// \brief `event` recorded on `stream`: it stands for everything ordered before that point.
void ordering_event_recorded(cudaEvent_t event, cudaStream_t stream);
/// \brief `event` destroyed.
void ordering_event_destroyed(cudaEvent_t event);
/// \brief cudaStreamWaitEvent: `stream`'s later operations come after what `event` stands for.
void ordering_stream_waits(cudaStream_t stream, cudaEvent_t event);
/// \brief The host waited for `stream` (cudaStreamSynchronize, a successful cudaStreamQuery, a
/// copy into host memory with cudaMemcpy).
void ordering_host_waits_stream(cudaStream_t stream);
/// \brief The host waited for `event` (cudaEventSynchronize, a successful cudaEventQuery).
void ordering_host_waits_event(cudaEvent_t event);
/// \brief The host waited for the whole device (cudaDeviceSynchronize, cudaFree).
void ordering_host_waits_all();
/// \brief An operation named `name` on `stream` that uses `accesses`: "" when every earlier
/// operation it conflicts with is ordered before it (and then it is recorded), else why not.
std::string ordering_operation(cudaStream_t stream, std::string_view name,
                               std::span<const Access> accesses);
/// \brief The allocation at `base` was freed: its history goes.
void ordering_freed(const void* base);

}  // namespace kvheap::sim
