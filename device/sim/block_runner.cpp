// The block scheduler of the CPU simulator: fiber lifecycle, the ready queue, and the deadlock
// report (see block_runner.hpp). The barrier and warp-collective entry points are in sync.cpp.
#include "device/sim/block_runner.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define KVHEAP_SIM_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define KVHEAP_SIM_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define KVHEAP_SIM_POISON(p, n) ((void)(p), (void)(n))
#define KVHEAP_SIM_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace kvheap::sim {
namespace {

thread_local BlockRunner* t_running = nullptr;
constexpr std::size_t kSmemAlign = 128;

}  // namespace

BlockRunner::BlockRunner()
    : stacks_(fiber_stack_bytes()),
      ready_(1024),
      warps_(32),
      smem_storage_(new std::byte[kMaxDynamicSmemOptin + kSmemAlign]) {
  auto addr = reinterpret_cast<std::uintptr_t>(smem_storage_.get());
  smem_ = smem_storage_.get() + ((kSmemAlign - addr % kSmemAlign) % kSmemAlign);
  fibers_.reserve(1024);
  install_fault_handler();  // so a fiber stack overflow is explained, not just a crash
}

BlockRunner::~BlockRunner() = default;

BlockRunner& BlockRunner::this_thread() {
  thread_local std::unique_ptr<BlockRunner> runner = std::make_unique<BlockRunner>();
  return *runner;
}

BlockRunner* BlockRunner::running() { return t_running; }

std::string BlockRunner::run_block(const LaunchSpec& spec, uint3 block_idx, int worker) {
  spec_ = &spec;
  if (kernel_name_ != spec.kernel_name) kernel_name_ = spec.kernel_name;
  block_idx_ = block_idx;
  worker_ = worker;
  n_threads_ = static_cast<int>(spec.block.x * spec.block.y * spec.block.z);
  done_ = 0;
  current_ = -1;
  cancelled_ = false;
  failure_.clear();
  barrier_ = BlockBarrier{};
  ready_head_ = ready_count_ = 0;

  detail::t_block_idx = block_idx;
  detail::t_block_dim = spec.block;
  detail::t_grid_dim = spec.grid;
  // Dynamic shared memory starts as all-ones bytes (NaN as floats) so a kernel that reads it
  // before writing it shows wrong numbers; under ASan the bytes past the launched size are
  // poisoned so an overrun is reported.
  const std::size_t smem_bytes = spec.dynamic_smem_bytes;
  std::memset(smem_, 0xff, smem_bytes);
  KVHEAP_SIM_POISON(smem_ + smem_bytes, kMaxDynamicSmemOptin - smem_bytes);
  detail::t_dynamic_smem = smem_bytes > 0 ? smem_ : nullptr;
  detail::t_dynamic_smem_bytes = smem_bytes;

  const int n_warps = (n_threads_ + 31) / 32;
  for (int w = 0; w < n_warps; ++w) {
    WarpState& ws = warps_[w];
    const int lanes = std::min(32, n_threads_ - w * 32);
    ws.existing = lanes == 32 ? ~0u : (1u << lanes) - 1;
    ws.exited = 0;
    for (WarpGroup& g : ws.groups) g.in_use = false;
  }

  fibers_.resize(static_cast<std::size_t>(n_threads_));
  for (int t = 0; t < n_threads_; ++t) {
    Fiber& f = fibers_[t];
    const unsigned bx = spec.block.x;
    const unsigned by = spec.block.y;
    const auto u = static_cast<unsigned>(t);
    f.tid = uint3{u % bx, u / bx % by, u / (bx * by)};
    f.wait = Wait::None;
    f.group = -1;
    f.open_copies.clear();
    f.batches.clear();
    make_fiber(f.ctx, stacks_.stack(static_cast<std::size_t>(t)), &BlockRunner::fiber_entry);
    f.state = State::Waiting;  // make_ready only admits waiting fibers
    make_ready(t);
  }

  t_running = this;
  run_until_idle();
  if (done_ < n_threads_) {
    // No fiber can run, yet some have not finished: a deadlock (or a failure already recorded).
    if (failure_.empty()) failure_ = deadlock_report();
    cancelled_ = true;
    for (int t = 0; t < n_threads_; ++t) make_ready(t);
    run_until_idle();  // every fiber unwinds from its barrier and finishes
  }
  t_running = nullptr;
  KVHEAP_SIM_UNPOISON(smem_ + smem_bytes, kMaxDynamicSmemOptin - smem_bytes);
  detail::t_dynamic_smem = nullptr;
  spec_ = nullptr;
  return failure_;
}

void BlockRunner::run_until_idle() {
  const int next = pop_ready();
  if (next < 0) return;
  current_ = next;
  fibers_[next].state = State::Running;
  detail::t_thread_idx = fibers_[next].tid;
  switch_context(scheduler_, fibers_[next].ctx, false);
  // Back here only when a fiber found nothing else ready.
}

void BlockRunner::fiber_entry() {
  BlockRunner& self = *t_running;
  enter_fiber(self.scheduler_);
  self.run_current_thread();
  self.finish_current();
}

void BlockRunner::run_current_thread() {
  if (cancelled_) return;
  try {
    spec_->run_thread(spec_->args);
  } catch (const Cancelled&) {
    // The block failed elsewhere; this thread has unwound.
  } catch (const std::exception& e) {
    record_failure("thread " + thread_name(current_) + " threw an exception: " + e.what());
  } catch (...) {
    record_failure("thread " + thread_name(current_) + " threw a non-standard exception");
  }
}

void BlockRunner::finish_current() {
  Fiber& me = fibers_[current_];
  if (!cancelled_ && (!me.open_copies.empty() || !me.batches.empty())) {
    // On a GPU the copies would land in shared memory no one reads, or after the block's
    // successor took it over: a kernel that means them must wait for them before it returns.
    std::size_t pending = me.open_copies.size();
    for (const auto& b : me.batches) pending += b.size();
    record_failure("thread " + thread_name(current_) + " returned with " + std::to_string(pending) +
                   " asynchronous copies not waited for (the last " + "queued at " +
                   std::string(me.copy_site.file) + ":" + std::to_string(me.copy_site.line) +
                   "); wait with __pipeline_wait_prior(0)");
  }
  me.state = State::Done;
  me.wait = Wait::None;
  ++done_;
  const int warp = current_ / 32;
  warps_[warp].exited |= 1u << (current_ % 32);
  // CUDA does not wait for exited lanes, so this exit may complete a warp collective.
  if (!cancelled_) complete_satisfied_groups(warp);
  switch_away(true);
  std::abort();  // a finished fiber is never resumed
}

void BlockRunner::switch_away(bool finished) {
  Fiber& me = fibers_[current_];
  const int next = pop_ready();
  if (next >= 0) {
    current_ = next;
    fibers_[next].state = State::Running;
    detail::t_thread_idx = fibers_[next].tid;
    switch_context(me.ctx, fibers_[next].ctx, finished);
  } else {
    current_ = -1;
    switch_context(me.ctx, scheduler_, finished);
  }
}

void BlockRunner::wait_until_ready() {
  fibers_[current_].state = State::Waiting;
  switch_away(false);
  if (cancelled_) throw Cancelled{};
}

void BlockRunner::make_ready(int t) {
  Fiber& f = fibers_[t];
  if (f.state != State::Waiting) return;
  f.state = State::Ready;
  ready_[(ready_head_ + ready_count_) % ready_.size()] = t;
  ++ready_count_;
}

int BlockRunner::pop_ready() {
  if (ready_count_ == 0) return -1;
  const int t = ready_[ready_head_];
  ready_head_ = (ready_head_ + 1) % ready_.size();
  --ready_count_;
  return t;
}

void BlockRunner::record_failure(std::string message) {
  if (failure_.empty()) failure_ = std::move(message);
  cancelled_ = true;
  for (int t = 0; t < n_threads_; ++t) make_ready(t);
}

void BlockRunner::fail(std::string message) {
  record_failure(std::move(message));
  throw Cancelled{};
}

std::string BlockRunner::thread_name(int t) const {
  const uint3 id = fibers_[t].tid;
  if (spec_->block.y == 1 && spec_->block.z == 1) return std::to_string(t);
  return std::to_string(t) + " (threadIdx " + std::to_string(id.x) + "," + std::to_string(id.y) +
         "," + std::to_string(id.z) + ")";
}

std::string BlockRunner::where_waiting(const Fiber& f) const {
  if (f.state == State::Done) return "returned without reaching it";
  if (f.wait == Wait::Block) {
    return std::string("waiting at ") + block_sync_name(barrier_.kind) + " at " +
           site_string(f.site);
  }
  if (f.wait == Wait::Warp) {
    const int warp = static_cast<int>(&f - fibers_.data()) / 32;
    const WarpGroup& g = warps_[warp].groups[f.group];
    char mask[16];
    std::snprintf(mask, sizeof mask, "0x%08x", g.mask);
    return std::string("waiting at ") + warp_op_name(g.op) + "(mask " + mask + ") at " +
           site_string(f.site);
  }
  return "not started";
}

}  // namespace kvheap::sim
