// Device and pinned memory of the CPU simulator (see memory.hpp).
#include "device/sim/memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace kvheap::sim {
namespace {

constexpr std::size_t kAlign = 256;              // cudaMalloc's guarantee
constexpr std::size_t kQuarantineBlocks = 1024;  // freed blocks kept recognisable
constexpr std::size_t kQuarantineBytes = std::size_t{1} << 30;
constexpr std::size_t kPoisonLimit = std::size_t{256} << 20;  // fill smaller blocks with 0xff

std::size_t page_size() {
  static const auto size = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

std::size_t default_capacity() {
  if (const char* env = std::getenv("KVHEAP_SIM_DEVICE_MEMORY_MB"); env != nullptr && *env != 0) {
    const long long mb = std::strtoll(env, nullptr, 10);
    if (mb > 0) return static_cast<std::size_t>(mb) << 20;
  }
  const auto pages = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES));
  return pages * page_size() / 2;
}

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

DeviceMemory& DeviceMemory::instance() {
  // Never destroyed: buffers held by other static objects may be freed after main() returns.
  static DeviceMemory* memory = new DeviceMemory();
  return *memory;
}

DeviceMemory::DeviceMemory() : capacity_(default_capacity()) {}

cudaError_t DeviceMemory::allocate(void** out, std::size_t bytes, MemoryKind kind,
                                   std::string& why) {
  std::lock_guard lock(mutex_);
  if (kind == MemoryKind::Device && bytes > capacity_ - std::min(used_, capacity_)) {
    why = "cudaMalloc of " + std::to_string(bytes) + " bytes: the simulated device has " +
          mib(capacity_ - used_) + " of " + mib(capacity_) +
          " free (KVHEAP_SIM_DEVICE_MEMORY_MB sets its size)";
    return cudaErrorMemoryAllocation;
  }
  Allocation a;
  a.bytes = bytes;
  a.kind = kind;
  if (kind == MemoryKind::Device && kProtects) {
    // [guard page][ ... data pushed against the end ][guard page]
    const std::size_t page = page_size();
    const std::size_t usable = (bytes + page - 1) / page * page;
    a.map_bytes = usable + 2 * page;
    void* base =
        mmap(nullptr, a.map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
      why = "cudaMalloc of " + std::to_string(bytes) + " bytes: mmap failed";
      return cudaErrorMemoryAllocation;
    }
    a.map_base = static_cast<std::byte*>(base);
    const auto end = reinterpret_cast<std::uintptr_t>(a.map_base + page + usable);
    a.user = reinterpret_cast<std::byte*>((end - bytes) / kAlign * kAlign);
    install_fault_handler();
  } else {
    void* p = nullptr;
    if (posix_memalign(&p, kind == MemoryKind::Device ? kAlign : page_size(), bytes) != 0) {
      why = "allocation of " + std::to_string(bytes) + " bytes failed";
      return cudaErrorMemoryAllocation;
    }
    a.user = static_cast<std::byte*>(p);
    a.map_base = a.user;
    a.map_bytes = bytes;
  }
  if (kind == MemoryKind::Device) {
    used_ += bytes;
    // cudaMalloc leaves memory unspecified; all-ones bytes (NaN floats) make a kernel that reads
    // what it never wrote (say, an accumulator nobody zeroed) fail here rather than on a GPU.
    if (kProtects) protect(a, true);
    if (bytes <= kPoisonLimit) std::memset(a.user, 0xff, bytes);
    if (kProtects) protect(a, false);  // a running launch opens it on its first access
  }
  blocks_.emplace(reinterpret_cast<std::uintptr_t>(a.map_base), a);
  *out = a.user;
  return cudaSuccess;
}

cudaError_t DeviceMemory::release(void* p, MemoryKind kind, std::string& why) {
  const char* api = kind == MemoryKind::Device ? "cudaFree" : "cudaFreeHost";
  std::lock_guard lock(mutex_);
  auto cit = locate(p, false);
  if (cit == blocks_.end()) {
    why = std::string(api) + ": " + (p == nullptr ? "null" : "pointer") + " was not returned by " +
          (kind == MemoryKind::Device ? "cudaMalloc" : "cudaMallocHost");
    return cudaErrorInvalidValue;
  }
  auto it = blocks_.find(cit->first);
  Allocation& a = it->second;
  if (a.freed) {
    why = std::string(api) + ": block of " + std::to_string(a.bytes) + " bytes freed twice";
    return cudaErrorInvalidValue;
  }
  if (a.user != p) {
    why = std::string(api) + ": pointer is " + std::to_string(static_cast<std::byte*>(p) - a.user) +
          " bytes into a block of " + std::to_string(a.bytes) + " bytes, not its start";
    return cudaErrorInvalidValue;
  }
  if (a.kind != kind) {
    why = std::string(api) + ": block was allocated with " +
          (a.kind == MemoryKind::Device ? "cudaMalloc; use cudaFree"
                                        : "cudaMallocHost; use cudaFreeHost");
    return cudaErrorInvalidValue;
  }
  if (kind == MemoryKind::Device) used_ -= a.bytes;
  if (kind == MemoryKind::Device && kProtects) {
    // Keep the range reserved but inaccessible and give its pages back, so a later access is
    // recognised as a use after free.
    protect(a, false);
    madvise(a.map_base, a.map_bytes, MADV_DONTNEED);
    a.freed = true;
    a.open_count = 0;
    quarantine_.push_back(it->first);
    quarantine_bytes_ += a.map_bytes;
    evict_quarantine();
  } else {
    std::free(a.user);
    blocks_.erase(it);
  }
  return cudaSuccess;
}

void DeviceMemory::evict_quarantine() {
  while (quarantine_.size() > kQuarantineBlocks || quarantine_bytes_ > kQuarantineBytes) {
    auto it = blocks_.find(quarantine_.front());
    quarantine_.pop_front();
    quarantine_bytes_ -= it->second.map_bytes;
    munmap(it->second.map_base, it->second.map_bytes);
    blocks_.erase(it);
  }
}

std::map<std::uintptr_t, Allocation>::const_iterator DeviceMemory::locate(const void* p,
                                                                          bool include_end) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  auto it = blocks_.upper_bound(addr);
  // The block starting at or below addr; when addr is the end of a malloc'd block, that may be
  // the block just after it, so look one further back too.
  for (int step = 0; step < 2 && it != blocks_.begin(); ++step) {
    --it;
    const auto user = reinterpret_cast<std::uintptr_t>(it->second.user);
    if (addr >= user && addr < user + it->second.bytes) return it;
    if (include_end && addr == user + it->second.bytes) return it;
  }
  return blocks_.end();
}

std::optional<Allocation> DeviceMemory::find(const void* p, bool include_end) const {
  std::lock_guard lock(mutex_);
  auto it = locate(p, include_end);
  if (it == blocks_.end()) return std::nullopt;
  return it->second;
}

std::optional<Allocation> DeviceMemory::find_mapping_nonblocking(const void* addr) const {
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return std::nullopt;
  --it;
  if (a >= it->first + it->second.map_bytes) return std::nullopt;
  return it->second;
}

void DeviceMemory::protect(Allocation& a, bool readable) {
  const std::size_t page = page_size();
  mprotect(a.map_base + page, a.map_bytes - 2 * page,
           readable ? PROT_READ | PROT_WRITE : PROT_NONE);
}

void DeviceMemory::open(const void* p) {
  if (!kProtects) return;
  std::lock_guard lock(mutex_);
  auto cit = locate(p, false);
  if (cit == blocks_.end()) return;
  Allocation& a = blocks_.find(cit->first)->second;
  if (a.kind == MemoryKind::Device && !a.freed && a.open_count++ == 0) protect(a, true);
}

void DeviceMemory::close(const void* p) {
  if (!kProtects) return;
  std::lock_guard lock(mutex_);
  auto cit = locate(p, false);
  if (cit == blocks_.end()) return;
  Allocation& a = blocks_.find(cit->first)->second;
  if (a.kind == MemoryKind::Device && !a.freed && a.open_count > 0 && --a.open_count == 0) {
    protect(a, false);
  }
}

void DeviceMemory::open_all() {
  if (!kProtects) return;
  ++global_open_;
}

void DeviceMemory::close_all() {
  if (!kProtects) return;
  std::lock_guard lock(mutex_);
  --global_open_;
  for (auto& [start, a] : blocks_) {
    if (!a.opened_by_launch) continue;
    a.opened_by_launch = false;
    if (--a.open_count == 0) protect(a, false);
  }
}

bool DeviceMemory::open_on_fault(const void* addr) {
  if (!kProtects || global_open_ == 0) return false;
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return true;  // an allocation on another thread: fault again soon
  const auto p = reinterpret_cast<std::uintptr_t>(addr);
  auto it = blocks_.upper_bound(p);
  if (it == blocks_.begin()) return false;
  --it;
  Allocation& a = it->second;
  const std::size_t page = page_size();
  const auto first = reinterpret_cast<std::uintptr_t>(a.map_base) + page;
  const auto end = reinterpret_cast<std::uintptr_t>(a.map_base) + a.map_bytes - page;
  if (a.kind != MemoryKind::Device || a.freed || p < first || p >= end) return false;
  if (a.open_count == 0) protect(a, true);  // else another thread opened it meanwhile
  if (!a.opened_by_launch) {
    a.opened_by_launch = true;
    ++a.open_count;
  }
  return true;
}

std::size_t DeviceMemory::used() const {
  std::lock_guard lock(mutex_);
  return used_;
}

}  // namespace kvheap::sim
