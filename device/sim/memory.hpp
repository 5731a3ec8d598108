// Device and pinned memory of the CPU simulator.
//
// Every cudaMalloc block is its own mapping: a guard page, the data pushed to the end of its
// pages (256-byte aligned, like cudaMalloc), and a guard page after it. Outside kernel launches
// and copies the data pages are PROT_NONE, so host code that dereferences a device pointer
// crashes as it would with a real GPU, and the fault handler names the allocation; a kernel that
// runs past the end of a block hits the guard page. Freed blocks stay reserved (and PROT_NONE)
// for a while so a use after cudaFree is recognised too.
//
// A launch opens only what its kernels touch: the first access to a block faults, the handler
// opens the block (open_on_fault) and the access is retried; the launch's end closes those
// blocks. Opening every block around every launch instead cost two mprotect calls per block per
// launch, and the kernel rewrote the page tables of all of device memory each time: 7.4 s a pass
// for a 135M-parameter model, against 0.29 s this way.
//
// Under AddressSanitizer the blocks come from malloc instead and are never protected: ASan's
// redzones then catch a kernel's out-of-bounds access to the byte, and ASan owns SIGSEGV.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "device/sim/fiber.hpp"

namespace kvheap::sim {

/// \brief Which allocator a block came from.
enum class MemoryKind : std::uint8_t { Device, Pinned };

/// \brief One cudaMalloc / cudaMallocHost block.
struct Allocation {
  std::byte* user = nullptr;             ///< what the caller got
  std::size_t bytes = 0;                 ///< what the caller asked for
  MemoryKind kind = MemoryKind::Device;  ///< cudaMalloc (Device) or cudaMallocHost (Pinned)
  bool freed = false;                    ///< in quarantine after cudaFree
  std::byte* map_base = nullptr;         ///< the whole mapping, guard pages included
  std::size_t map_bytes = 0;             ///< size of the whole mapping, guard pages included
  int open_count = 0;                    ///< launches and copies that currently need it readable
  bool opened_by_launch = false;  ///< a kernel's first access opened it; close_all() closes it
};

/// \brief The simulator's allocator for device and pinned memory (one per process).
class DeviceMemory {
 public:
  /// \brief True when device memory is PROT_NONE outside launches and copies (not under ASan).
  static constexpr bool kProtects = !kAsan;

  /// \brief The process-wide instance.
  static DeviceMemory& instance();

  /// \brief Allocates `bytes` (> 0). Returns cudaErrorMemoryAllocation, with `why` filled in,
  /// when the simulated device memory (see capacity()) would be exceeded.
  cudaError_t allocate(void** out, std::size_t bytes, MemoryKind kind, std::string& why);
  /// \brief Frees a block returned by allocate() with the same kind; anything else (a pointer
  /// into a block, a freed block, the wrong kind) is cudaErrorInvalidValue with `why`.
  cudaError_t release(void* p, MemoryKind kind, std::string& why);

  /// \brief The block containing `p` (freed ones included); `include_end` also accepts the
  /// one-past-the-end address.
  [[nodiscard]] std::optional<Allocation> find(const void* p, bool include_end = false) const;

  /// \brief Makes the device block containing `p` readable and writable until close(p).
  void open(const void* p);
  /// \brief Undoes one open(p).
  void close(const void* p);
  /// \brief Starts a launch: until close_all(), a block a kernel touches opens on its first
  /// access (open_on_fault), so a launch pays for the blocks it uses, not for every block.
  void open_all();
  /// \brief Ends one open_all(): closes the blocks its kernels opened.
  void close_all();
  /// \brief For the fault handler, during a launch: opens the live device block whose usable
  /// pages hold `addr` and returns true, so the access is retried; true too when another thread
  /// holds the allocator (the retry comes back). False outside launches and for an address no
  /// live block's usable pages hold: a real fault, which the handler describes.
  bool open_on_fault(const void* addr);

  /// \brief Bytes of device memory allocated now.
  [[nodiscard]] std::size_t used() const;
  /// \brief Simulated device memory: KVHEAP_SIM_DEVICE_MEMORY_MB, else half the host's RAM.
  [[nodiscard]] std::size_t capacity() const { return capacity_; }

  /// \brief For the fault handler, which must not block: the block whose mapping contains
  /// `addr`, or nothing (also when the allocator is busy on another thread).
  [[nodiscard]] std::optional<Allocation> find_mapping_nonblocking(const void* addr) const;

 private:
  DeviceMemory();
  std::map<std::uintptr_t, Allocation>::const_iterator locate(const void* p,
                                                              bool include_end) const;
  void protect(Allocation& a, bool readable);
  void evict_quarantine();

  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Allocation> blocks_;  // keyed by map_base
  std::deque<std::uintptr_t> quarantine_;        // freed device blocks, oldest first
  std::size_t quarantine_bytes_ = 0;
  std::size_t used_ = 0;
  std::size_t capacity_ = 0;
  std::atomic<int> global_open_ = 0;  // launches running now
};

/// \brief Keeps the device block containing a pointer open for the scope (no-op for others).
class ScopedOpen {
 public:
  /// \brief Opens the device block containing `p` (see DeviceMemory::open) until destruction.
  explicit ScopedOpen(const void* p) : p_(p) { DeviceMemory::instance().open(p_); }
  ~ScopedOpen() { DeviceMemory::instance().close(p_); }
  ScopedOpen(const ScopedOpen&) = delete;
  ScopedOpen& operator=(const ScopedOpen&) = delete;

 private:
  const void* p_;
};

/// \brief Installs the SIGSEGV handler that explains faults on device memory (idempotent; done
/// by the first device allocation; never under ASan).
void install_fault_handler();

/// \brief Gives the calling OS thread an alternate signal stack if it has none, so the fault
/// handler can run even when a fiber overflowed its stack; removes it again on destruction.
class SignalStack {
 public:
  SignalStack();
  ~SignalStack();
  SignalStack(const SignalStack&) = delete;
  SignalStack& operator=(const SignalStack&) = delete;

 private:
  void* memory_ = nullptr;
};

}  // namespace kvheap::sim
