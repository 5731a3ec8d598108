#include "device/sim/ordering.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "device/sim/memory.hpp"

namespace kvheap::sim {
namespace {

using Clock = std::unordered_map<std::uint64_t, std::uint64_t>;  // stream id -> operations

void join(Clock& into, const Clock& from) {
  for (const auto& [s, n] : from) into[s] = std::max(into[s], n);
}

/// The n-th operation of stream `stream` (n from 1; 0: none).
struct Op {
  std::uint64_t stream = 0, n = 0;
  std::string name;
};

struct Stream {
  Clock clock;
  bool blocking = true;  // ordered with the legacy default stream
};

/// An allocation's last writer, and its last reader on each stream since.
struct History {
  Op write;
  std::unordered_map<std::uint64_t, Op> reads;
};

constexpr std::uint64_t kLegacy = 0;  // the default stream, legacy or per-thread

struct State {
  std::mutex mutex;
  std::uint64_t next_id = 1;
  std::unordered_map<const void*, std::uint64_t> ids;  // live streams
  std::unordered_map<std::uint64_t, Stream> streams = {{kLegacy, {}}};
  std::unordered_map<const void*, Clock> events;  // recorded ones
  Clock host;                                     // what the host has waited for
  std::unordered_map<const void*, History> history;
};

State& state() {
  static State s;
  return s;
}

std::uint64_t id_of(State& s, cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return kLegacy;
  const auto it = s.ids.find(stream);
  if (it != s.ids.end()) return it->second;
  // A live stream the simulator made before this bookkeeping saw it: a blocking one.
  const std::uint64_t id = s.next_id++;
  s.ids[stream] = id;
  s.streams[id] = Stream{};
  return id;
}

/// `stream`'s clock with what an operation issued now on it must come after: what the host has
/// waited for, and the legacy stream's or the blocking streams' work, as CUDA orders them.
Stream& current(State& s, std::uint64_t id) {
  Stream& st = s.streams[id];
  join(st.clock, s.host);
  if (id == kLegacy) {
    for (auto& [other, o] : s.streams)
      if (other != kLegacy && o.blocking) join(st.clock, o.clock);
  } else if (st.blocking) {
    join(st.clock, s.streams[kLegacy].clock);
  }
  return st;
}

std::string stream_name(std::uint64_t id) {
  return id == kLegacy ? "the default stream" : "stream #" + std::to_string(id);
}

}  // namespace

void ordering_stream_created(cudaStream_t stream, unsigned flags) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const std::uint64_t id = s.next_id++;
  s.ids[stream] = id;
  s.streams[id] = Stream{{}, (flags & cudaStreamNonBlocking) == 0};
}

void ordering_stream_destroyed(cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.ids.erase(stream);  // its clock stays: other clocks and histories name its id
}

void ordering_event_recorded(cudaEvent_t event, cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.events[event] = current(s, id_of(s, stream)).clock;
}

void ordering_event_destroyed(cudaEvent_t event) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.events.erase(event);
}

void ordering_stream_waits(cudaStream_t stream, cudaEvent_t event) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto it = s.events.find(event);
  if (it == s.events.end()) return;  // never recorded: CUDA waits for nothing
  const Clock recorded = it->second;
  join(s.streams[id_of(s, stream)].clock, recorded);
}

void ordering_host_waits_stream(cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  // What was issued on the stream, and what that waited for; not the work of other streams that
  // the stream's next operation would wait for.
  const Clock c = s.streams[id_of(s, stream)].clock;
  join(s.host, c);
}

void ordering_host_waits_event(cudaEvent_t event) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto it = s.events.find(event);
  if (it != s.events.end()) join(s.host, it->second);
}

void ordering_host_waits_all() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  for (auto& [id, st] : s.streams) join(s.host, st.clock);
}

std::string ordering_operation(cudaStream_t stream, std::string_view name,
                               std::span<const Access> accesses) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const std::uint64_t id = id_of(s, stream);
  Stream& st = current(s, id);
  const std::uint64_t n = st.clock[id] + 1;
  const auto ordered = [&](const Op& op) {
    return op.n == 0 || (op.stream == id ? op.n < n : st.clock[op.stream] >= op.n);
  };
  std::vector<History*> touched(accesses.size(), nullptr);
  for (std::size_t a = 0; a < accesses.size(); ++a) {
    const std::optional<Allocation> block = DeviceMemory::instance().find(accesses[a].ptr);
    if (!block || block->freed) continue;
    History& h = s.history[block->user];
    touched[a] = &h;
    const Op* clash = !ordered(h.write) ? &h.write : nullptr;
    const char* how = "wrote";
    if (clash == nullptr && accesses[a].writes)
      for (const auto& [reader, op] : h.reads)
        if (!ordered(op)) {
          clash = &op;
          how = "read";
          break;
        }
    if (clash != nullptr) {
      char where[32];
      std::snprintf(where, sizeof where, "%p", static_cast<const void*>(block->user));
      return std::string(name) + " on " + stream_name(id) + " " +
             (accesses[a].writes ? "may write" : "reads") + " the allocation at " + where + " (" +
             std::string(accesses[a].what) + "), which " + clash->name + " on " +
             stream_name(clash->stream) + " " + how +
             ", and nothing orders the two: a GPU may run them at the same time. Record an event "
             "after the first and make the second's stream wait for it (cudaStreamWaitEvent), "
             "or put both on one stream";
    }
  }
  st.clock[id] = n;
  for (std::size_t a = 0; a < accesses.size(); ++a) {
    if (touched[a] == nullptr) continue;
    const Op op{id, n, std::string(name)};
    if (accesses[a].writes) {
      touched[a]->write = op;
      touched[a]->reads.clear();
    } else {
      touched[a]->reads[id] = op;
    }
  }
  return {};
}

void ordering_freed(const void* base) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.history.erase(base);
}

}  // namespace kvheap::sim
