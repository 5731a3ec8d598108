// The pure rules of the simulated barriers and warp intrinsics (see barrier.hpp).
#include "device/sim/barrier.hpp"

#include <bit>
#include <cstring>

namespace kvheap::sim {

using detail::WarpOp;

bool is_shuffle(WarpOp op) {
  return op == WarpOp::ShflIdx || op == WarpOp::ShflUp || op == WarpOp::ShflDown ||
         op == WarpOp::ShflXor;
}

bool joins(WarpOp group_op, WarpOp op) {
  return group_op == op || (is_shuffle(group_op) && is_shuffle(op));
}

int shuffle_source(WarpOp op, int lane, int arg, int width) {
  // PTX shfl.sync with c = ((32 - width) << 8) | clamp: the segment of `width` lanes holding
  // `lane` is [min_lane, max_lane]; a computed source beyond the clamp reads the lane itself.
  const int seg_mask = (32 - width) & 31;  // high lane bits that pick the segment
  const int min_lane = lane & seg_mask;
  const int max_lane = min_lane | (31 & ~seg_mask);
  const int b = arg & 31;  // PTX uses only the low five bits of the lane/delta operand
  int src = lane;
  bool in_range = true;
  switch (op) {
    case WarpOp::ShflIdx: src = min_lane | (b & ~seg_mask); break;
    case WarpOp::ShflUp:
      src = lane - b;
      in_range = src >= min_lane;
      break;
    case WarpOp::ShflDown:
      src = lane + b;
      in_range = src <= max_lane;
      break;
    case WarpOp::ShflXor:
      src = lane ^ b;
      in_range = src <= max_lane;
      break;
    default: break;
  }
  return in_range ? src : lane;
}

std::uint64_t group_result(const WarpGroup& g, int lane) {
  unsigned votes = 0;
  switch (g.op) {
    case WarpOp::Sync:
    case WarpOp::Mma:
    case WarpOp::Ldmatrix: return 0;  // these write each lane's registers themselves
    case WarpOp::ShflIdx:
    case WarpOp::ShflUp:
    case WarpOp::ShflDown:
    case WarpOp::ShflXor: {
      const int src = static_cast<std::uint8_t>(g.source[lane]);  // lanes 0..31
      return (g.arrived >> src & 1u) != 0 ? g.value[src] : kPoison;
    }
    case WarpOp::Ballot:
    case WarpOp::Any:
    case WarpOp::All:
      for (int l = 0; l < 32; ++l) {
        if ((g.arrived >> l & 1u) != 0 && g.value[l] != 0) votes |= 1u << l;
      }
      if (g.op == WarpOp::Ballot) return votes;
      if (g.op == WarpOp::Any) return votes != 0 ? 1 : 0;
      return votes == g.arrived ? 1 : 0;
  }
  return 0;
}

unsigned missing_lanes(const WarpGroup& g, const WarpState& w) {
  return g.mask & w.existing & ~w.exited & ~g.arrived;
}

const char* warp_op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Sync: return "__syncwarp";
    case WarpOp::ShflIdx: return "__shfl_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::Ballot: return "__ballot_sync";
    case WarpOp::Any: return "__any_sync";
    case WarpOp::All: return "__all_sync";
    case WarpOp::Mma: return "mma.sync.m16n8k16";
    case WarpOp::Ldmatrix: return "ldmatrix.sync.m8n8.x4";
  }
  return "warp intrinsic";
}

const char* block_sync_name(detail::BlockSync kind) {
  switch (kind) {
    case detail::BlockSync::Plain: return "__syncthreads()";
    case detail::BlockSync::Count: return "__syncthreads_count()";
    case detail::BlockSync::And: return "__syncthreads_and()";
    case detail::BlockSync::Or: return "__syncthreads_or()";
  }
  return "__syncthreads()";
}

bool same_site(const detail::SourceSite& a, const detail::SourceSite& b) {
  return a.line == b.line && a.column == b.column && std::strcmp(a.file, b.file) == 0;
}

std::string site_string(const detail::SourceSite& s) {
  std::string_view file = s.file;
  // Keep "folder/file.cu": enough to find it, short enough to read in a test log.
  const auto last = file.rfind('/');
  if (last != std::string_view::npos && last > 0) {
    const auto before = file.rfind('/', last - 1);
    file.remove_prefix(before == std::string_view::npos ? 0 : before + 1);
  }
  return std::string(file) + ":" + std::to_string(s.line);
}

std::string ranges_string(const std::vector<int>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ids[i]);
    if (j > i) {
      out += '-';  // appended piecewise: GCC 12 warns falsely (-Wrestrict) on "-" + to_string
      out += std::to_string(ids[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace kvheap::sim
