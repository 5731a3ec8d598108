// Fibers for the CPU simulator: context switches (with AddressSanitizer annotations) and the
// per-OS-thread pool of guarded fiber stacks.
#include "device/sim/fiber.hpp"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

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

#if defined(KVHEAP_SIM_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
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

using SwapFn = int (*)(ucontext_t*, const ucontext_t*);

// Under ASan, glibc's own swapcontext (found through libc's handle, not the global scope where
// ASan's interceptor sits); the annotations below do the interceptor's job properly.
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

}  // namespace

void make_fiber(Context& ctx, std::span<std::byte> stack, void (*entry)()) {
  if (getcontext(&ctx.uc) != 0) die("getcontext failed");
  ctx.uc.uc_stack.ss_sp = stack.data();
  ctx.uc.uc_stack.ss_size = stack.size();
  ctx.uc.uc_link = nullptr;  // entry never returns
  ctx.stack_bottom = stack.data();
  ctx.stack_size = stack.size();
  ctx.asan_fake_stack = nullptr;
  makecontext(&ctx.uc, entry, 0);
}

void switch_context(Context& from, Context& to, bool from_finished) {
#if defined(KVHEAP_SIM_ASAN)
  __sanitizer_start_switch_fiber(from_finished ? nullptr : &from.asan_fake_stack, to.stack_bottom,
                                 to.stack_size);
#else
  (void)from_finished;
#endif
  if (swap_fn()(&from.uc, &to.uc) != 0) die("swapcontext failed");
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
#if defined(KVHEAP_SIM_ASAN)
  // A reused stack still carries the shadow of the frames its last fiber never returned from.
  ASAN_UNPOISON_MEMORY_REGION(s, stack_bytes_);
#endif
  return {s, stack_bytes_};
}

bool StackPool::is_guard_page(const void* addr) const {
  const auto* a = static_cast<const std::byte*>(addr);
  if (a < region_ || a >= region_ + kMaxStacks * stride_) return false;
  return static_cast<std::size_t>(a - region_) % stride_ < page_size();
}

}  // namespace kvheap::sim
