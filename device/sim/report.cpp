// Failure reports of the simulated block scheduler: what a deadlocked block is waiting for, and
// which threads reached a different __syncthreads. They name barriers by intrinsic and call
// site, and threads by number (x + y*blockDim.x + z*blockDim.x*blockDim.y), compressed to ranges.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "device/sim/block_runner.hpp"

namespace kvheap::sim {
namespace {

// "thread 5" or "threads 5-9, 12" (or lanes).
std::string who(const char* noun, const std::vector<int>& ids) {
  return std::string(noun) + (ids.size() == 1 ? " " : "s ") + ranges_string(ids);
}

// Groups ids by the description of where each one is, keeping first-seen order.
template <class Describe>
std::string describe_missing(const char* noun, const std::vector<int>& ids, Describe describe) {
  std::vector<std::pair<std::string, std::vector<int>>> classes;
  for (int id : ids) {
    std::string d = describe(id);
    auto it = classes.begin();
    while (it != classes.end() && it->first != d) ++it;
    if (it == classes.end()) {
      classes.emplace_back(std::move(d), std::vector<int>{id});
    } else {
      it->second.push_back(id);
    }
  }
  std::string out;
  for (const auto& [where, members] : classes) {
    if (!out.empty()) out += "; ";
    out += who(noun, members) + " " + where;
  }
  return out;
}

std::string hex_mask(unsigned mask) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", mask);
  return buf;
}

}  // namespace

std::string BlockRunner::deadlock_report() const {
  std::string out = "deadlock: no thread of the block can make progress";
  if (spec_->block.y != 1 || spec_->block.z != 1) {
    out += " (threads numbered x + y*blockDim.x + z*blockDim.x*blockDim.y)";
  }
  if (barrier_.arrived > 0) {
    std::vector<int> arrived;
    std::vector<int> missing;
    for (int t = 0; t < n_threads_; ++t) {
      (fibers_[t].wait == Wait::Block ? arrived : missing).push_back(t);
    }
    out += "\n  " + std::string(block_sync_name(barrier_.kind)) + " at " +
           site_string(barrier_.site) + " was reached by " + who("thread", arrived) + " of " +
           std::to_string(n_threads_) + "; missing: " +
           describe_missing("thread", missing, [&](int t) { return where_waiting(fibers_[t]); });
  }
  for (std::size_t warp = 0; warp * 32 < static_cast<std::size_t>(n_threads_); ++warp) {
    const WarpState& w = warps_[warp];
    for (const WarpGroup& g : w.groups) {
      if (!g.in_use || g.complete) continue;
      std::vector<int> arrived;
      std::vector<int> missing;
      const unsigned gone = missing_lanes(g, w);
      for (int lane = 0; lane < 32; ++lane) {
        if ((g.arrived >> lane & 1u) != 0) arrived.push_back(lane);
        if ((gone >> lane & 1u) != 0) missing.push_back(lane);
      }
      out += "\n  " + std::string(warp_op_name(g.op)) + "(mask " + hex_mask(g.mask) + ") at " +
             site_string(g.site) + " in warp " + std::to_string(warp) + " was reached by " +
             who("lane", arrived) +
             "; missing: " + describe_missing("lane", missing, [&](int lane) {
               return where_waiting(fibers_[warp * 32 + static_cast<std::size_t>(lane)]);
             });
    }
  }
  return out;
}

std::string BlockRunner::divergence_report(detail::BlockSync kind,
                                           const detail::SourceSite& site) const {
  std::vector<int> waiting;
  for (int t = 0; t < n_threads_; ++t) {
    if (fibers_[t].wait == Wait::Block) waiting.push_back(t);
  }
  const char* verb = waiting.size() == 1 ? " waits at " : " wait at ";
  return "divergent barrier: " + who("thread", waiting) + verb + block_sync_name(barrier_.kind) +
         " at " + site_string(barrier_.site) + ", but thread " + thread_name(current_) +
         " arrived at " + block_sync_name(kind) + " at " + site_string(site) +
         "; every thread of a block must reach the same __syncthreads (CUDA leaves a divergent "
         "barrier undefined)";
}

}  // namespace kvheap::sim
