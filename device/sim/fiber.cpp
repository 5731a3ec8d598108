// Fibers for the CPU simulator: context switches (with AddressSanitizer annotations) and the
// per-OS-thread pool of guarded fiber stacks.
#include "device/sim/fiber.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
#define KVHEAP_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVHEAP_SIM_ASAN 1
#endif
#endif

#if !defined(KVHEAP_SIM_STACK_SWITCH)
#include <dlfcn.h>  // glibc's own swapcontext, under ASan
#endif

#if defined(KVHEAP_SIM_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(KVHEAP_SIM_STACK_SWITCH)
// kvheap_sim_switch_stack(save_sp, load_sp): pushes the registers the x86-64 System V ABI has a
// callee preserve (rbp, rbx, r12-r15) and the two floating-point control words (MXCSR, the x87
// control word) onto the current stack, stores the stack pointer in *save_sp, then loads load_sp
// and pops the same from there, so its `ret` returns into whichever context saved load_sp (or,
// the first time, into a fiber's entry function; see make_fiber). Everything else is
// caller-saved, so the compiler has already spilled it around this call. No unwind tables: no
// exception or unwinder ever walks through a switch, since each fiber's frames end at its entry.
extern "C" void kvheap_sim_switch_stack(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl kvheap_sim_switch_stack
  .hidden kvheap_sim_switch_stack
  .type kvheap_sim_switch_stack, @function
  .p2align 4
kvheap_sim_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kvheap_sim_switch_stack, .-kvheap_sim_switch_stack
)");

#endif

namespace kvheap::sim {
namespace {

constexpr std::size_t kMaxStacks = 1024;  // one per CUDA thread of the largest block

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "kvheap simulator: %s\n", what);
  std::abort();
}

std::size_t page_size() {
  static const std::size_t size = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

#if defined(KVHEAP_SIM_STACK_SWITCH)

void make_fiber(Context& ctx, std::span<std::byte> stack, void (*entry)()) {
#if defined(KVHEAP_SIM_ASAN)
  // A reused stack still carries ASan's poison for the frames its last fiber never returned from:
  // those live at its final switch, between the stack pointer that switch saved and the top.
  // Every frame below them returned (or was unwound by an exception), and ASan cleared its shadow
  // then. Clearing only that span, not the whole 256 KiB stack for every thread of every block,
  // took the L2-flush test from 11.4 s to 5.0 s under ASan. It comes first: the new frame
  // below is written into that span.
  auto* const last_sp = static_cast<std::byte*>(ctx.sp);
  if (last_sp >= stack.data() && last_sp < stack.data() + stack.size()) {
    ASAN_UNPOISON_MEMORY_REGION(last_sp,
                                static_cast<std::size_t>(stack.data() + stack.size() - last_sp));
  } else {
    ASAN_UNPOISON_MEMORY_REGION(stack.data(), stack.size());  // this context's first fiber here
  }
#endif
  // The frame kvheap_sim_switch_stack pops on the first switch in, from the lowest address: the
  // control words (this thread's current ones), six zeroed registers (rbp = 0 ends frame-pointer
  // walks), the address its `ret` jumps to (entry), and a null return address for entry, which
  // never returns. The stack top is 16-byte aligned, so entry starts with rsp = 8 mod 16, as
  // after a call.
  std::uint32_t mxcsr = 0;
  std::uint16_t x87_cw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(x87_cw));
  const auto top =
      reinterpret_cast<std::uintptr_t>(stack.data() + stack.size()) & ~std::uintptr_t{15};
  auto* slot = reinterpret_cast<std::uint64_t*>(top);
  *--slot = 0;                                        // entry's return address
  *--slot = reinterpret_cast<std::uintptr_t>(entry);  // where the first switch's ret goes
  for (int r = 0; r < 6; ++r) *--slot = 0;            // rbp, rbx, r12, r13, r14, r15
  *--slot = mxcsr | std::uint64_t{x87_cw} << 32;
  ctx.sp = slot;
  ctx.stack_bottom = stack.data();
  ctx.stack_size = stack.size();
  ctx.asan_fake_stack = nullptr;
}

namespace {

void switch_stacks(Context& from, Context& to) { kvheap_sim_switch_stack(&from.sp, to.sp); }

}  // namespace

#else  // swapcontext

namespace {

using SwapFn = int (*)(ucontext_t*, const ucontext_t*);

// Under ASan, glibc's own swapcontext (found through libc's handle, not the global scope where
// ASan's interceptor sits); the annotations in switch_context do the interceptor's job properly.
SwapFn swap_fn() {
  if constexpr (!kAsan) {
    return &::swapcontext;
  } else {
    static const SwapFn fn = [] {
      void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
      void* sym = libc != nullptr ? dlsym(libc, "swapcontext") : nullptr;
      return sym != nullptr ? reinterpret_cast<SwapFn>(sym) : &::swapcontext;
    }();
    return fn;
  }
}

void switch_stacks(Context& from, Context& to) {
  if (swap_fn()(&from.uc, &to.uc) != 0) die("swapcontext failed");
}

}  // namespace

void make_fiber(Context& ctx, std::span<std::byte> stack, void (*entry)()) {
#if defined(KVHEAP_SIM_ASAN)
  // A reused stack still carries ASan's poison for the frames its last fiber never returned from.
  ASAN_UNPOISON_MEMORY_REGION(stack.data(), stack.size());
#endif
  if (getcontext(&ctx.uc) != 0) die("getcontext failed");
  ctx.uc.uc_stack.ss_sp = stack.data();
  ctx.uc.uc_stack.ss_size = stack.size();
  ctx.uc.uc_link = nullptr;  // entry never returns
  ctx.stack_bottom = stack.data();
  ctx.stack_size = stack.size();
  ctx.asan_fake_stack = nullptr;
  makecontext(&ctx.uc, entry, 0);
}

#endif

void switch_context(Context& from, Context& to, bool from_finished) {
#if defined(KVHEAP_SIM_ASAN)
  __sanitizer_start_switch_fiber(from_finished ? nullptr : &from.asan_fake_stack, to.stack_bottom,
                                 to.stack_size);
#else
  (void)from_finished;
#endif
  switch_stacks(from, to);
#if defined(KVHEAP_SIM_ASAN)
  __sanitizer_finish_switch_fiber(from.asan_fake_stack, nullptr, nullptr);
#endif
}

void enter_fiber(Context& scheduler) {
#if defined(KVHEAP_SIM_ASAN)
  const void* came_from = nullptr;
  std::size_t came_from_size = 0;
  __sanitizer_finish_switch_fiber(nullptr, &came_from, &came_from_size);
  if (scheduler.stack_size == 0) {
    scheduler.stack_bottom = came_from;
    scheduler.stack_size = came_from_size;
  }
#else
  (void)scheduler;
#endif
}

std::size_t fiber_stack_bytes() {
  static const std::size_t bytes = [] {
    std::size_t kib = kAsan ? 256 : 64;
    if (const char* env = std::getenv("KVHEAP_SIM_STACK_KB"); env != nullptr && *env != '\0') {
      const long v = std::strtol(env, nullptr, 10);
      if (v < 16 || v > 16384) die("KVHEAP_SIM_STACK_KB must be between 16 and 16384");
      kib = static_cast<std::size_t>(v);
    }
    const std::size_t page = page_size();
    return (kib * 1024 + page - 1) / page * page;
  }();
  return bytes;
}

StackPool::StackPool(std::size_t stack_bytes)
    : stack_bytes_(stack_bytes), stride_(stack_bytes + page_size()) {
  // Reserve only: MAP_NORESERVE + PROT_NONE commits nothing until stack() opens a stack.
  void* p = mmap(nullptr, kMaxStacks * stride_, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) die("could not reserve address space for fiber stacks");
  region_ = static_cast<std::byte*>(p);
}

StackPool::~StackPool() {
  if (region_ != nullptr) munmap(region_, kMaxStacks * stride_);
}

std::span<std::byte> StackPool::stack(std::size_t i) {
  if (i >= kMaxStacks) die("more fibers requested than a block may have threads");
  while (ready_ <= i) {
    std::byte* s = region_ + ready_ * stride_ + page_size();  // the page below stays a guard
    if (mprotect(s, stack_bytes_, PROT_READ | PROT_WRITE) != 0) {
      die("mprotect failed while preparing a fiber stack (vm.max_map_count too low?)");
    }
    ++ready_;
  }
  std::byte* s = region_ + i * stride_ + page_size();
  return {s, stack_bytes_};  // make_fiber clears what ASan's shadow still holds of its last use
}

bool StackPool::is_guard_page(const void* addr) const {
  const auto* a = static_cast<const std::byte*>(addr);
  if (a < region_ || a >= region_ + kMaxStacks * stride_) return false;
  return static_cast<std::size_t>(a - region_) % stride_ < page_size();
}

}  // namespace kvheap::sim
