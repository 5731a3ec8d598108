// The simulator's SIGSEGV handler: turns a fault on device memory, a guard page or a fiber stack
// guard into a sentence that names the mistake, then aborts. Faults it does not recognise go to
// whatever handler was installed before (or the default action).
//
// It runs on the faulting thread, on the alternate signal stack when one is set (SignalStack), and
// formats with snprintf: not async-signal-safe on paper, acceptable for a process about to abort.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "device/sim/block_runner.hpp"
#include "device/sim/memory.hpp"

namespace kvheap::sim {
namespace {

struct sigaction g_previous {};

int describe(const void* addr, char* buf, std::size_t size) {
  const BlockRunner* runner = BlockRunner::running();
  if (runner != nullptr && runner->stacks().is_guard_page(addr)) {
    return std::snprintf(buf, size,
                         "kvheap simulator: kernel %s overflowed its %zu KiB per-thread stack "
                         "(fault at %p): large local arrays or deep recursion? "
                         "KVHEAP_SIM_STACK_KB raises the limit\n",
                         runner->kernel_name(), runner->stacks().stack_bytes() / 1024, addr);
  }
  const auto found = DeviceMemory::instance().find_mapping_nonblocking(addr);
  if (!found && runner != nullptr) {
    return std::snprintf(buf, size,
                         "kvheap simulator: kernel %s faulted on address %p, which is not device "
                         "memory (a null or host pointer, or an index far out of bounds)\n",
                         runner->kernel_name(), addr);
  }
  if (!found) return -1;
  const Allocation& a = *found;
  char who[320];
  if (runner != nullptr) {
    std::snprintf(who, sizeof who, "kernel %s", runner->kernel_name());
  } else {
    std::snprintf(who, sizeof who, "host code");
  }
  const auto* p = static_cast<const std::byte*>(addr);
  if (a.freed) {
    return std::snprintf(buf, size,
                         "kvheap simulator: %s accessed %p inside a cudaMalloc block of %zu bytes "
                         "at %p that was already freed (use after cudaFree)\n",
                         who, addr, a.bytes, static_cast<void*>(a.user));
  }
  if (p >= a.user + a.bytes) {
    return std::snprintf(buf, size,
                         "kvheap simulator: %s accessed %p, %zu bytes past the end of a cudaMalloc "
                         "block of %zu bytes at %p\n",
                         who, addr, static_cast<std::size_t>(p - (a.user + a.bytes)), a.bytes,
                         static_cast<void*>(a.user));
  }
  if (p < a.user) {
    return std::snprintf(buf, size,
                         "kvheap simulator: %s accessed %p, %zu bytes before the start of a "
                         "cudaMalloc block of %zu bytes at %p\n",
                         who, addr, static_cast<std::size_t>(a.user - p), a.bytes,
                         static_cast<void*>(a.user));
  }
  if (runner != nullptr) {
    return std::snprintf(buf, size,
                         "kvheap simulator: %s accessed device memory at %p that was not open "
                         "during the launch (allocated by another thread meanwhile?)\n",
                         who, addr);
  }
  return std::snprintf(buf, size,
                       "kvheap simulator: host code dereferenced device memory at %p (inside a "
                       "cudaMalloc block of %zu bytes at %p, offset %zu); copy it to the host "
                       "first (cudaMemcpy, DeviceBuffer::download)\n",
                       addr, a.bytes, static_cast<void*>(a.user),
                       static_cast<std::size_t>(p - a.user));
}

void on_segv(int sig, siginfo_t* info, void* context) {
  // During a launch, a kernel's first touch of a device block opens it; the access is retried.
  if (DeviceMemory::instance().open_on_fault(info->si_addr)) return;
  char msg[1024];
  const int n = describe(info->si_addr, msg, sizeof msg);
  if (n > 0) {
    const std::size_t len = std::min(static_cast<std::size_t>(n), sizeof msg - 1);
    [[maybe_unused]] const auto written = write(STDERR_FILENO, msg, len);
    std::abort();
  }
  // Not ours: hand it on.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  } else {
    // Restore the default action; returning re-executes the access, which then kills us.
    sigaction(SIGSEGV, &g_previous, nullptr);
  }
}

}  // namespace

void install_fault_handler() {
  if constexpr (!DeviceMemory::kProtects) return;
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = &on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous);
  });
}

SignalStack::SignalStack() {
  if constexpr (!DeviceMemory::kProtects) return;
  stack_t current{};
  if (sigaltstack(nullptr, &current) != 0 || (current.ss_flags & SS_DISABLE) == 0) return;
  constexpr std::size_t kBytes = 64 * 1024;
  memory_ = std::malloc(kBytes);
  if (memory_ == nullptr) return;
  stack_t ss{};
  ss.ss_sp = memory_;
  ss.ss_size = kBytes;
  if (sigaltstack(&ss, nullptr) != 0) {
    std::free(memory_);
    memory_ = nullptr;
  }
}

SignalStack::~SignalStack() {
  if (memory_ == nullptr) return;
  stack_t ss{};
  ss.ss_flags = SS_DISABLE;
  sigaltstack(&ss, nullptr);
  std::free(memory_);
}

}  // namespace kvheap::sim
