// Barrier state of one simulated block, and the pure rules of CUDA's warp intrinsics.
//
// __syncthreads is one BlockBarrier per block: an arrival count and a generation. The warp
// collectives (__syncwarp, shuffles, votes) meet in WarpGroups, the per-warp exchange area: each
// lane leaves its value in its slot and waits; when the group completes, each lane reads the slot
// it asked for. The functions below hold the parts of that which do not depend on scheduling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/sim/thread_state.hpp"

namespace kvheap::sim {

/// \brief The block-wide barrier: an arrival count and a generation, and where it was reached.
struct BlockBarrier {
  unsigned arrived = 0;          ///< threads waiting in the current generation
  std::uint64_t generation = 0;  ///< bumped each time the whole block has arrived
  detail::BlockSync kind = detail::BlockSync::Plain;  ///< the flavour this generation waits in
  detail::SourceSite site{};  ///< where the first thread of this generation arrived
  int accumulator = 0;        ///< count / and / or of this generation's predicates
  int result = 0;             ///< the last completed generation's outcome
};

/// \brief One warp collective in progress: the lanes of `mask` rendezvous, each leaving a value.
///
/// The first lane to arrive with a (mask, operation) that no open group matches opens a group;
/// the group completes when every lane of the mask that exists and has not exited has arrived,
/// and is freed once the last member has read its result. A lane belongs to at most one group at
/// a time, so 32 per warp suffice, and a fast lane that moves on to the next collective opens a
/// new group instead of overwriting slots its slower neighbours have not read yet. (This plays
/// the role of the "second barrier generation" of a single shared exchange area.)
struct WarpGroup {
  bool in_use = false;    ///< the slot holds a group (open, or complete with unread results)
  bool complete = false;  ///< every lane it waits for has arrived; results may be read
  detail::WarpOp op = detail::WarpOp::Sync;  ///< the collective, as the opening lane called it
  unsigned mask = 0;          ///< the lanes that take part, as passed to the intrinsic
  unsigned arrived = 0;       ///< lanes that have contributed
  unsigned readers = 0;       ///< members that have not yet read their result
  detail::SourceSite site{};  ///< where the lane that opened the group called the intrinsic
  std::uint64_t value[32]{};  ///< each lane's contribution: the bits of its value or predicate
  std::int8_t source[32]{};   ///< shuffles: the lane each lane reads
  bool mixed_types = false;   ///< an mma or ldmatrix whose lanes passed different forms
};

/// \brief The warp groups and lane liveness of one warp.
struct WarpState {
  unsigned existing = 0;  ///< lanes that exist (a partial last warp has fewer than 32)
  unsigned exited = 0;    ///< lanes whose thread has returned
  WarpGroup groups[32];   ///< slots for the collectives in progress (one per lane suffices)
};

/// \brief Bits of a shuffle read from a lane that did not take part (NaN for floats, -1 for ints).
inline constexpr std::uint64_t kPoison = ~std::uint64_t{0};

/// \brief True for the four shuffle operations.
bool is_shuffle(detail::WarpOp op);
/// \brief True for the warp-wide matrix operations (mma, ldmatrix): all 32 lanes, one call site.
inline bool whole_warp(detail::WarpOp op) {
  return op == detail::WarpOp::Mma || op == detail::WarpOp::Ldmatrix;
}
/// \brief True when a lane arriving with `op` may join a group opened by `group_op`: any two
/// shuffles may (each lane carries its own source), other operations only with themselves.
bool joins(detail::WarpOp group_op, detail::WarpOp op);
/// \brief The lane a shuffle reads, by the shfl.sync rules of PTX: the lane itself when the
/// computed source falls outside the lane's segment of `width` lanes.
int shuffle_source(detail::WarpOp op, int lane, int arg, int width);
/// \brief This lane's result of a completed group.
std::uint64_t group_result(const WarpGroup& g, int lane);
/// \brief Lanes the group still waits for: mask lanes that exist, have not exited, not arrived.
unsigned missing_lanes(const WarpGroup& g, const WarpState& w);

/// \brief The intrinsic's name, for messages: "__shfl_xor_sync".
const char* warp_op_name(detail::WarpOp op);
/// \brief "__syncthreads()", "__syncthreads_count()", ...
const char* block_sync_name(detail::BlockSync kind);
/// \brief Two call sites are the same when file, line and column match.
bool same_site(const detail::SourceSite& a, const detail::SourceSite& b);
/// \brief The last two components of the file and the line: "device/sim_kernels.cu:42".
std::string site_string(const detail::SourceSite& s);
/// \brief Sorted ids printed as ranges: "0-15, 17, 20-31".
std::string ranges_string(const std::vector<int>& sorted_ids);

}  // namespace kvheap::sim
