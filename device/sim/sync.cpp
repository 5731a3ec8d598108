// Barriers and warp collectives of the CPU simulator: the BlockRunner members behind
// __syncthreads, __syncwarp, shuffles, votes and tensor-core products, and the detail:: entry
// points the kernel-side intrinsics call (see thread_state.hpp).
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_fp16.h>

#include "device/sim/block_runner.hpp"
#include "device/sim/counters.hpp"

namespace kvheap::sim {

using detail::BlockSync;
using detail::WarpOp;

int BlockRunner::block_sync(BlockSync kind, int predicate, const detail::SourceSite& site) {
  BlockBarrier& b = barrier_;
  if (b.arrived == 0) {
    b.kind = kind;
    b.site = site;
    b.accumulator = kind == BlockSync::And ? 1 : 0;
  } else if (b.kind != kind || !same_site(b.site, site)) {
    fail(divergence_report(kind, site));
  }
  const int p = predicate != 0 ? 1 : 0;
  if (kind == BlockSync::Count) b.accumulator += p;
  if (kind == BlockSync::And) b.accumulator &= p;
  if (kind == BlockSync::Or) b.accumulator |= p;

  Fiber& me = fibers_[current_];
  me.wait = Wait::Block;
  me.site = site;
  if (++b.arrived == static_cast<unsigned>(n_threads_)) {
    // The generation moves on: everyone waiting here may run again.
    b.result = b.accumulator;
    b.arrived = 0;
    ++b.generation;
    for (int t = 0; t < n_threads_; ++t) {
      if (fibers_[t].wait == Wait::Block) {
        fibers_[t].wait = Wait::None;
        make_ready(t);
      }
    }
  } else {
    wait_until_ready();
  }
  me.wait = Wait::None;
  return b.result;
}

std::uint64_t BlockRunner::warp_collective(WarpOp op, unsigned mask, std::uint64_t value, int arg,
                                           int width, const detail::SourceSite& site) {
  const int t = current_;
  const int warp = t / 32;
  const int lane = t % 32;
  const unsigned bit = 1u << lane;
  WarpState& w = warps_[warp];
  if ((mask & bit) == 0) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", mask);
    fail("thread " + thread_name(t) + " (lane " + std::to_string(lane) + " of warp " +
         std::to_string(warp) + ") called " + warp_op_name(op) + " at " + site_string(site) +
         " with mask " + hex + ", which does not include its own lane");
  }
  if (whole_warp(op) && mask != 0xffffffffu) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", mask);
    fail(std::string(warp_op_name(op)) + " at " + site_string(site) + " with mask " + hex +
         ": it takes all 32 lanes of the warp");
  }
  if (is_shuffle(op) && (width < 1 || width > 32 || !std::has_single_bit(unsigned(width)))) {
    fail(std::string(warp_op_name(op)) + " at " + site_string(site) + ": width " +
         std::to_string(width) + " is not a power of two between 1 and 32");
  }

  // Join the open group of this (mask, operation) that this lane has not joined yet, or open one.
  WarpGroup* g = nullptr;
  int index = -1;
  for (int i = 0; i < 32 && g == nullptr; ++i) {
    WarpGroup& c = w.groups[i];
    // An mma (or ldmatrix) joins only lanes at the same call site: on a GPU, lanes at two
    // different mma.sync instructions do not make one product (the wait is then a deadlock, and
    // reported so).
    if (c.in_use && !c.complete && c.mask == mask && joins(c.op, op) && (c.arrived & bit) == 0 &&
        (!whole_warp(op) || same_site(c.site, site))) {
      g = &c;
      index = i;
    }
  }
  for (int i = 0; i < 32 && g == nullptr; ++i) {
    if (!w.groups[i].in_use) {
      g = &w.groups[i];
      index = i;
      *g = WarpGroup{};
      g->in_use = true;
      g->op = op;
      g->mask = mask;
      g->site = site;
    }
  }
  if (g == nullptr) fail("internal error: warp " + std::to_string(warp) + " ran out of groups");

  g->value[lane] = value;
  if (is_shuffle(op))
    g->source[lane] = static_cast<std::int8_t>(shuffle_source(op, lane, arg, width));
  g->arrived |= bit;
  Fiber& me = fibers_[t];
  me.wait = Wait::Warp;
  me.group = index;
  me.site = site;
  if (missing_lanes(*g, w) == 0) {
    complete_group(warp, *g);
  } else {
    wait_until_ready();
  }
  me.wait = Wait::None;
  me.group = -1;
  if (whole_warp(op) && g->arrived != 0xffffffffu) {
    std::vector<int> absent;
    for (int l = 0; l < 32; ++l)
      if ((g->arrived >> l & 1u) == 0) absent.push_back(l);
    fail(std::string(warp_op_name(op)) + " at " + site_string(site) + " in warp " +
         std::to_string(warp) + ": lanes " + ranges_string(absent) +
         " exited or do not exist, and it needs all 32 lanes");
  }
  if (whole_warp(op) && g->mixed_types)
    fail(std::string(warp_op_name(op)) + " at " + site_string(site) + " in warp " +
         std::to_string(warp) +
         (op == WarpOp::Mma ? ": its lanes pass different input types (fp16 and bf16)"
                            : ": some lanes ask for .trans and some do not"));
  const std::uint64_t result = group_result(*g, lane);
  if (--g->readers == 0) g->in_use = false;
  return result;
}

namespace {

/// The work of a whole-warp operation whose lanes passed a Lane each: `work` over all 32 when
/// `form` (the element type, the layout) is the same in every lane; false, doing nothing, when not.
template <class Lane, class Form, class Work>
bool whole_warp_work(const WarpGroup& g, Form form, Work work) {
  Lane* lanes[32];
  for (int l = 0; l < 32; ++l) {
    lanes[l] = reinterpret_cast<Lane*>(g.value[l]);
    if (form(*lanes[l]) != form(*lanes[0])) return false;
  }
  work(lanes);
  return true;
}

}  // namespace

void BlockRunner::complete_group(int warp, WarpGroup& g) {
  g.complete = true;
  // Every lane's fragments are on its stack, which waits intact until the lane reads its result.
  // (A lane's fragments are gone once it has read its result: only here may they be read.)
  if (g.arrived == 0xffffffffu && g.op == WarpOp::Mma)
    g.mixed_types = !whole_warp_work<detail::MmaLane>(
        g, [](const detail::MmaLane& l) { return l.type; }, detail::mma_m16n8k16_product);
  if (g.arrived == 0xffffffffu && g.op == WarpOp::Ldmatrix)
    g.mixed_types = !whole_warp_work<detail::LdmatrixLane>(
        g, [](const detail::LdmatrixLane& l) { return l.trans; }, detail::ldmatrix_x4_gather);
  g.readers = static_cast<unsigned>(std::popcount(g.arrived));
  for (int lane = 0; lane < 32; ++lane) {
    if ((g.arrived >> lane & 1u) != 0) make_ready(warp * 32 + lane);  // skips the running lane
  }
}

void BlockRunner::complete_satisfied_groups(int warp) {
  WarpState& w = warps_[warp];
  for (WarpGroup& g : w.groups) {
    if (g.in_use && !g.complete && missing_lanes(g, w) == 0) complete_group(warp, g);
  }
}

unsigned BlockRunner::active_mask() const {
  const WarpState& w = warps_[current_ / 32];
  return w.existing & ~w.exited;
}

void BlockRunner::async_copy(void* dst, const void* src, std::size_t bytes, std::size_t zfill,
                             const detail::SourceSite& site) {
  const auto misaligned = [bytes](const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % bytes != 0;
  };
  if ((bytes != 4 && bytes != 8 && bytes != 16) || zfill > bytes)
    fail("__pipeline_memcpy_async at " + site_string(site) + " copies " + std::to_string(bytes) +
         " bytes with " + std::to_string(zfill) + " filled: cp.async moves 4, 8 or 16 bytes");
  if (misaligned(dst) || (zfill < bytes && misaligned(src)))
    fail("__pipeline_memcpy_async at " + site_string(site) + ": a " + std::to_string(bytes) +
         "-byte copy needs both pointers aligned to " + std::to_string(bytes) + " bytes");
  Fiber& me = fibers_[current_];
  me.open_copies.push_back({dst, src, bytes, zfill});
  if (zfill < bytes) detail::count(detail::Count::KernelCopy, static_cast<long>(bytes - zfill));
  me.copy_site = site;
}

void BlockRunner::async_commit() {
  Fiber& me = fibers_[current_];
  me.batches.push_back(std::move(me.open_copies));
  me.open_copies.clear();
}

void BlockRunner::async_wait_prior(std::size_t prior) {
  Fiber& me = fibers_[current_];
  std::size_t landed = 0;
  for (; landed + prior < me.batches.size(); ++landed)
    for (const AsyncCopy& c : me.batches[landed]) {
      const std::size_t copied = c.bytes - c.zfill;
      if (copied > 0) std::memcpy(c.dst, c.src, copied);
      std::memset(static_cast<std::byte*>(c.dst) + copied, 0, c.zfill);
    }
  me.batches.erase(me.batches.begin(), me.batches.begin() + static_cast<long>(landed));
}

namespace detail {
namespace {

BlockRunner& runner(const char* what, const detail::SourceSite& site) {
  BlockRunner* r = BlockRunner::running();
  if (r == nullptr) {
    std::fprintf(stderr, "kvheap simulator: %s called outside a kernel launch at %s\n", what,
                 site_string(site).c_str());
    std::abort();
  }
  return *r;
}

}  // namespace

int block_sync(BlockSync kind, int predicate, const detail::SourceSite& site) {
  return runner(block_sync_name(kind), site).block_sync(kind, predicate, site);
}

std::uint64_t warp_collective(WarpOp op, unsigned mask, std::uint64_t value, int arg, int width,
                              const detail::SourceSite& site) {
  return runner(warp_op_name(op), site).warp_collective(op, mask, value, arg, width, site);
}

unsigned active_mask() { return runner("__activemask", detail::SourceSite{}).active_mask(); }

void mma_m16n8k16(const MmaLane& lane, const SourceSite& site) {
  runner("mma.sync", site)
      .warp_collective(WarpOp::Mma, 0xffffffffu, reinterpret_cast<std::uintptr_t>(&lane), 0, 32,
                       site);
}

void ldmatrix_x4(const LdmatrixLane& lane, const SourceSite& site) {
  BlockRunner& r = runner("ldmatrix", site);
  if (reinterpret_cast<std::uintptr_t>(lane.row) % 16 != 0)
    r.fail(std::string("ldmatrix at ") + site_string(site) +
           ": a row address must be 16-byte aligned");
  r.warp_collective(WarpOp::Ldmatrix, 0xffffffffu, reinterpret_cast<std::uintptr_t>(&lane), 0, 32,
                    site);
}

void ldmatrix_x4_gather(LdmatrixLane* const (&lanes)[32]) {
  // Element (row, column) of matrix j: column `column` of the row lane 8j + row names.
  const auto element = [&](int j, int row, int column) {
    return static_cast<unsigned>(
        static_cast<const std::uint16_t*>(lanes[8 * j + row]->row)[column]);
  };
  unsigned regs[32][4];
  for (int l = 0; l < 32; ++l)
    for (int j = 0; j < 4; ++j) {
      const int a = l / 4, b = 2 * (l % 4);
      regs[l][j] = lanes[0]->trans ? element(j, b, a) | element(j, b + 1, a) << 16
                                   : element(j, a, b) | element(j, a, b + 1) << 16;
    }
  for (int l = 0; l < 32; ++l)  // written last: a lane's registers may alias the rows it names
    for (int j = 0; j < 4; ++j) lanes[l]->out[j] = regs[l][j];
}

void mma_m16n8k16_product(MmaLane* const (&lanes)[32]) {
  // The fragment layout of the PTX ISA for m16n8k16 (groupID = lane / 4, its place in the group
  // t = lane % 4): A element i of a lane is row groupID + 8 (i / 2 % 2), column 2t + i % 2 +
  // 8 (i / 4); B element i is row (k) 2t + i % 2 + 8 (i / 2), column groupID; accumulator i is
  // row groupID + 8 (i / 2), column 2t + i % 2.
  const auto element = [type = lanes[0]->type](const unsigned* regs, int i) {
    const auto bits = static_cast<unsigned short>(regs[i / 2] >> (16 * (i % 2)));
    if (type == MmaType::BF16) return std::bit_cast<float>(static_cast<unsigned>(bits) << 16);
    return __half2float(std::bit_cast<__half>(bits));
  };
  float a[16][16], b[16][8], c[16][8];
  for (int l = 0; l < 32; ++l) {
    const int gid = l / 4, t = l % 4;
    for (int i = 0; i < 8; ++i)
      a[gid + 8 * (i / 2 % 2)][2 * t + i % 2 + 8 * (i / 4)] = element(lanes[l]->a, i);
    for (int i = 0; i < 4; ++i) {
      b[2 * t + i % 2 + 8 * (i / 2)][gid] = element(lanes[l]->b, i);
      c[gid + 8 * (i / 2)][2 * t + i % 2] = lanes[l]->d[i];
    }
  }
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 16; ++k) c[r][n] += a[r][k] * b[k][n];  // each product exact in fp32
  for (int l = 0; l < 32; ++l) {
    const int gid = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) lanes[l]->d[i] = c[gid + 8 * (i / 2)][2 * t + i % 2];
  }
}

void trap(const detail::SourceSite& site) {
  runner("__trap", site).fail("__trap() called at " + site_string(site));
}

void async_copy(void* dst, const void* src, std::size_t bytes, std::size_t zfill,
                const SourceSite& site) {
  runner("__pipeline_memcpy_async", site).async_copy(dst, src, bytes, zfill, site);
}

void async_commit(const SourceSite& site) { runner("__pipeline_commit", site).async_commit(); }

void async_wait_prior(std::size_t prior, const SourceSite& site) {
  runner("__pipeline_wait_prior", site).async_wait_prior(prior);
}

int current_worker() {
  BlockRunner* r = BlockRunner::running();
  return r != nullptr ? r->worker() : -1;
}

}  // namespace detail
}  // namespace kvheap::sim
