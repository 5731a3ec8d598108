// Fibers for the CPU simulator: saved contexts, the switch between them, and the stacks they run
// on. Every CUDA thread of a block is one fiber; the OS thread that runs the block keeps its own
// context (the "scheduler" context) to return to when no fiber can run.
//
// On x86-64 the switch is twenty instructions of our own (fiber.cpp) that save the callee-saved
// registers on the old stack and load them from the new one. Elsewhere it is glibc's swapcontext,
// which also saves and restores the signal mask with a system call on every switch: a kernel's
// __syncthreads or warp shuffle switches once per thread, so those switches took most of the
// simulator's time: two of the slowest GPU tests ran 2.4 and 6.5 times longer with swapcontext.
//
// Under AddressSanitizer every switch is announced with __sanitizer_start_switch_fiber and
// __sanitizer_finish_switch_fiber so ASan knows which stack is live. The swapcontext fallback
// bypasses ASan's interceptor, whose only effects are a warning and wiping the shadow of the
// target stack, which the annotations make unnecessary.
#pragma once

// KVHEAP_SIM_UCONTEXT, defined for the whole build (-DCMAKE_CXX_FLAGS=-DKVHEAP_SIM_UCONTEXT, as
// Context's layout depends on it), selects swapcontext on x86-64 too: to compare the two, or to
// rule the switch out when chasing a simulator bug.
#if defined(__x86_64__) && !defined(KVHEAP_SIM_UCONTEXT)
#define KVHEAP_SIM_STACK_SWITCH 1  // fiber.cpp's own switch; otherwise swapcontext
#else
#include <ucontext.h>
#endif

#include <cstddef>
#include <span>

namespace kvheap::sim {

/// \brief True when this translation unit is built with AddressSanitizer.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAsan = true;
#else
inline constexpr bool kAsan = false;
#endif
#else
inline constexpr bool kAsan = false;
#endif

/// \brief A saved execution context: a fiber's, or the OS thread's own (the scheduler's).
struct Context {
#if defined(KVHEAP_SIM_STACK_SWITCH)
  void* sp = nullptr;  ///< saved stack pointer; the saved registers lie on that stack
#else
  ucontext_t uc{};  ///< registers and stack pointer, for swapcontext
#endif
  const void* stack_bottom = nullptr;  ///< lowest address of the stack (ASan needs it)
  std::size_t stack_size = 0;          ///< 0 for the OS thread's stack until a fiber learns it
  void* asan_fake_stack = nullptr;     ///< ASan's per-fiber fake-stack handle while switched out
};

/// \brief Prepares `ctx` so that switching to it calls `entry` on `stack`. `entry` must never
/// return: it ends by switching away with `from_finished` set. Under ASan it also clears what the
/// stack's last fiber left poisoned, found from the stack pointer `ctx` saved last: so `ctx` must
/// be fresh or the context that last ran on `stack` (BlockRunner keeps thread t on stack t).
void make_fiber(Context& ctx, std::span<std::byte> stack, void (*entry)());

/// \brief Switches from `from` to `to`; returns when something switches back to `from`.
/// `from_finished` says `from` will never be resumed (ASan then releases its fake stack).
void switch_context(Context& from, Context& to, bool from_finished);

/// \brief First call in a fresh fiber: completes the switch for ASan. When `scheduler` has no
/// known stack yet, records the stack the fiber came from there (the first fiber of a block is
/// always entered from the scheduler).
void enter_fiber(Context& scheduler);

/// \brief Bytes of stack per fiber: 64 KiB (256 KiB under ASan, whose frames are larger), or
/// KVHEAP_SIM_STACK_KB when set.
std::size_t fiber_stack_bytes();

/// \brief The fiber stacks of one OS thread, reused from block to block.
///
/// One reserved region holds up to 1024 stacks, each with a PROT_NONE guard page below it, so a
/// fiber that overflows its stack faults on the guard page (and the fault handler says so)
/// instead of silently overwriting its neighbour.
class StackPool {
 public:
  /// \brief Reserves address space for 1024 stacks of `stack_bytes` (nothing is committed yet).
  explicit StackPool(std::size_t stack_bytes);
  ~StackPool();
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;

  /// \brief Stack number `i` (< 1024), made usable on first request.
  std::span<std::byte> stack(std::size_t i);
  /// \brief True when `addr` lies in one of this pool's guard pages.
  [[nodiscard]] bool is_guard_page(const void* addr) const;
  /// \brief Usable bytes per stack.
  [[nodiscard]] std::size_t stack_bytes() const { return stack_bytes_; }

 private:
  std::size_t stack_bytes_;
  std::size_t stride_;  // guard page + stack
  std::byte* region_ = nullptr;
  std::size_t ready_ = 0;  // stacks made usable so far
};

}  // namespace kvheap::sim
