// The block scheduler of the CPU simulator: runs one block on the calling OS thread, each CUDA
// thread as a fiber, and switches fibers only at barriers and warp collectives.
//
// A fiber that reaches a barrier which is not complete yet waits; it becomes ready again only
// when the barrier completes (its generation moves on), never by blind round-robin, so threads
// waiting at different barriers never see each other's half-written exchange slots. A waiting
// fiber hands the OS thread straight to the next ready fiber (one swapcontext per switch); when
// no fiber is ready the scheduler context takes over: either every thread has finished, or the
// block is deadlocked and the scheduler reports which barrier waits for which threads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "device/sim/barrier.hpp"
#include "device/sim/fiber.hpp"
#include "device/sim/memory.hpp"
#include "device/sim/sim.hpp"

namespace kvheap::sim {

/// \brief Runs blocks of a launch on one OS thread, each CUDA thread of a block as a fiber.
class BlockRunner {
 public:
  BlockRunner();
  ~BlockRunner();
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  /// \brief The runner of the calling OS thread, created on first use.
  static BlockRunner& this_thread();
  /// \brief The runner whose block is executing on the calling OS thread, or null.
  static BlockRunner* running();

  /// \brief Runs block `block_idx` of `spec` to completion. Returns "" on success, else what went
  /// wrong (deadlock report, trap, exception), without the kernel's name.
  std::string run_block(const LaunchSpec& spec, uint3 block_idx, int worker);

  /// \brief __syncthreads and its _count/_and/_or forms (see detail::block_sync).
  int block_sync(detail::BlockSync kind, int predicate, const detail::SourceSite& site);
  /// \brief One warp collective (see detail::warp_collective).
  std::uint64_t warp_collective(detail::WarpOp op, unsigned mask, std::uint64_t value, int arg,
                                int width, const detail::SourceSite& site);
  /// \brief Lanes of the calling thread's warp that exist and have not exited.
  [[nodiscard]] unsigned active_mask() const;
  /// \brief The asynchronous copies of the calling thread (see detail::async_copy and the rest).
  void async_copy(void* dst, const void* src, std::size_t bytes, std::size_t zfill,
                  const detail::SourceSite& site);
  /// \brief Closes the calling thread's open batch of asynchronous copies.
  void async_commit();
  /// \brief Lands the calling thread's committed batches but the newest `prior`.
  void async_wait_prior(std::size_t prior);
  /// \brief Fails the block with `message` (first failure wins) and unwinds the calling fiber.
  [[noreturn]] void fail(std::string message);

  /// \brief Index of the worker thread this runner serves (0 = the launching thread).
  [[nodiscard]] int worker() const { return worker_; }
  /// \brief Name of the kernel being run, for the fault handler.
  [[nodiscard]] const char* kernel_name() const { return kernel_name_.c_str(); }
  /// \brief This thread's fiber stacks, for the fault handler's stack-overflow check.
  [[nodiscard]] const StackPool& stacks() const { return stacks_; }

 private:
  enum class State : std::uint8_t { Ready, Running, Waiting, Done };
  enum class Wait : std::uint8_t { None, Block, Warp };

  /// One asynchronous copy, queued until a wait lands it.
  struct AsyncCopy {
    void* dst;
    const void* src;
    std::size_t bytes;
    std::size_t zfill;  // the last zfill bytes are zeros, not copied
  };

  /// One CUDA thread.
  struct Fiber {
    Context ctx;
    uint3 tid{0, 0, 0};
    State state = State::Done;
    Wait wait = Wait::None;
    int group = -1;  // index in the warp's groups while wait == Warp
    detail::SourceSite site{};
    std::vector<AsyncCopy> open_copies;           // the batch not yet committed
    std::vector<std::vector<AsyncCopy>> batches;  // committed, oldest first
    detail::SourceSite copy_site{};               // where the last copy was queued
  };

  /// Thrown inside a fiber to unwind it once the block has failed; never escapes the fiber.
  struct Cancelled {};

  static void fiber_entry();
  void run_current_thread();
  [[noreturn]] void finish_current();
  void run_until_idle();
  void switch_away(bool finished);
  void wait_until_ready();
  void make_ready(int t);
  int pop_ready();
  void record_failure(std::string message);
  void complete_group(int warp, WarpGroup& g);
  void complete_satisfied_groups(int warp);
  [[nodiscard]] std::string deadlock_report() const;
  [[nodiscard]] std::string divergence_report(detail::BlockSync kind,
                                              const detail::SourceSite& site) const;
  [[nodiscard]] std::string where_waiting(const Fiber& f) const;
  [[nodiscard]] std::string thread_name(int t) const;

  SignalStack signal_stack_;  // lets the fault handler run after a fiber stack overflow
  StackPool stacks_;
  Context scheduler_;
  std::vector<Fiber> fibers_;
  std::vector<int> ready_;  // ring buffer of fiber indices; each fiber at most once
  std::size_t ready_head_ = 0;
  std::size_t ready_count_ = 0;
  int current_ = -1;
  int n_threads_ = 0;
  int done_ = 0;
  BlockBarrier barrier_;
  std::vector<WarpState> warps_;
  bool cancelled_ = false;
  std::string failure_;
  const LaunchSpec* spec_ = nullptr;
  std::string kernel_name_;
  uint3 block_idx_{0, 0, 0};
  int worker_ = 0;
  std::unique_ptr<std::byte[]> smem_storage_;  // dynamic shared memory, with room to align
  std::byte* smem_ = nullptr;
};

/// \brief Largest dynamic shared memory a block may use after cudaFuncSetAttribute (227 KiB).
inline constexpr std::size_t kMaxDynamicSmemOptin = 227 * 1024;
/// \brief Dynamic shared memory a block may use without the attribute (48 KiB).
inline constexpr std::size_t kDefaultDynamicSmem = 48 * 1024;

}  // namespace kvheap::sim
