// Kernel launches in the CPU simulator: the checks a GPU makes before it runs anything, and the
// grid run itself, its blocks spread over a small pool of OS threads (see sim.hpp).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device/sim/block_runner.hpp"
#include "device/sim/counters.hpp"
#include "device/sim/memory.hpp"
#include "device/sim/ordering.hpp"
#include "device/sim/runtime.hpp"
#include "device/sim/sim.hpp"

namespace kvheap::sim {
namespace {

std::atomic<int> g_workers{0};  // 0: not chosen yet
std::mutex g_launch_mutex;      // one grid at a time: the pool serves one launch

std::string dims(dim3 d) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "(%u,%u,%u)", d.x, d.y, d.z);
  return buf;
}

/// Persistent threads that run job(i) for i in 1..n-1 while the caller runs job(0).
class WorkerPool {
 public:
  static WorkerPool& instance() {
    static WorkerPool pool;
    return pool;
  }

  void run(int n, const std::function<void(int)>& job) {
    {
      std::lock_guard lock(mutex_);
      while (static_cast<int>(threads_.size()) < n - 1) {
        const int index = static_cast<int>(threads_.size()) + 1;
        threads_.emplace_back([this, index] { loop(index); });
      }
      job_ = &job;
      wanted_ = n;
      pending_ = n - 1;
      ++generation_;
    }
    start_.notify_all();
    job(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

  ~WorkerPool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void loop(int index) {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= wanted_) continue;
      const std::function<void(int)>* job = job_;
      lock.unlock();
      (*job)(index);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  int wanted_ = 0;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

// What a GPU refuses before running anything: (error, reason), or cudaSuccess. An impossible
// shape is cudaErrorInvalidValue, as CUDA 13.0's runtime answered each of these shapes on an H200
// (driver 580); the reason says which limit the shape breaks, which the runtime does not.
std::pair<cudaError_t, std::string> check_config(const LaunchSpec& s) {
  const dim3 b = s.block;
  const dim3 g = s.grid;
  if (b.x == 0 || b.y == 0 || b.z == 0) {
    return {cudaErrorInvalidValue, "blockDim " + dims(b) + " has a zero dimension"};
  }
  if (g.x == 0 || g.y == 0 || g.z == 0) {
    return {cudaErrorInvalidValue,
            "gridDim " + dims(g) + " is empty (a zero dimension); skip the launch instead"};
  }
  if (b.x > 1024 || b.y > 1024 || b.z > 64) {
    return {cudaErrorInvalidValue,
            "blockDim " + dims(b) + " exceeds the per-dimension limits (1024, 1024, 64)"};
  }
  const std::uint64_t threads = std::uint64_t{b.x} * b.y * b.z;
  if (threads > 1024) {
    return {cudaErrorInvalidValue, "blockDim " + dims(b) + " has " + std::to_string(threads) +
                                       " threads; a block may have at most 1024"};
  }
  if (g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
    return {cudaErrorInvalidValue,
            "gridDim " + dims(g) + " exceeds the limits (2^31-1, 65535, 65535)"};
  }
  const std::size_t limit = max_dynamic_smem(s.kernel);
  if (s.dynamic_smem_bytes > limit) {
    return {cudaErrorInvalidValue,
            "asks for " + std::to_string(s.dynamic_smem_bytes) +
                " bytes of dynamic shared memory; the kernel may use " + std::to_string(limit) +
                " (48 KiB unless raised with cudaFuncSetAttribute(kernel, "
                "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), at most 227 KiB)"};
  }
  if (!is_live_stream(s.stream)) {
    return {cudaErrorInvalidResourceHandle, "stream is not a live cudaStream_t"};
  }
  for (const PointerArg& arg : s.pointer_args) {
    if (arg.value == nullptr) continue;
    char where[32];
    std::snprintf(where, sizeof where, "%p", arg.value);
    const PointerKind kind = classify_pointer(arg.value);
    if (kind == PointerKind::FreedDevice) {
      return {cudaErrorInvalidValue, "argument " + std::to_string(arg.index) + " (" + where +
                                         ") points into device memory that was freed"};
    }
    if (kind == PointerKind::Host) {
      return {cudaErrorInvalidValue,
              "argument " + std::to_string(arg.index) + " (" + where +
                  ") is host memory; a kernel may only dereference device memory (cudaMalloc) "
                  "or pinned host memory (cudaMallocHost)"};
    }
  }
  return {cudaSuccess, {}};
}

}  // namespace

int worker_threads() {
  int n = g_workers.load();
  if (n > 0) return n;
  if (const char* env = std::getenv("KVHEAP_SIM_THREADS"); env != nullptr && *env != '\0') {
    n = static_cast<int>(std::strtol(env, nullptr, 10));
  } else {
    n = std::min(8, static_cast<int>(std::thread::hardware_concurrency()));
  }
  n = std::clamp(n, 1, 64);
  g_workers.store(n);
  return n;
}

void set_worker_threads(int n) { g_workers.store(std::clamp(n, 1, 64)); }

ScopedDeviceAccess::ScopedDeviceAccess() { DeviceMemory::instance().open_all(); }
ScopedDeviceAccess::~ScopedDeviceAccess() { DeviceMemory::instance().close_all(); }

cudaError_t launch_kernel(const LaunchSpec& spec) {
  if (const BlockRunner* outer = BlockRunner::running(); outer != nullptr) {
    return api_fail(cudaErrorNotSupported, "launched from inside kernel " +
                                               std::string(outer->kernel_name()) +
                                               "; the simulator has no dynamic parallelism");
  }
  if (auto [error, why] = check_config(spec); error != cudaSuccess) {
    return api_fail(error, "grid " + dims(spec.grid) + ", block " + dims(spec.block) + ": " + why);
  }

  detail::count(detail::Count::Launch);
  std::lock_guard launch_lock(g_launch_mutex);
  {
    std::vector<std::string> names;
    std::vector<Access> uses;
    names.reserve(spec.pointer_args.size());
    for (const PointerArg& arg : spec.pointer_args) {
      names.push_back("argument " + std::to_string(arg.index));
      uses.push_back({arg.value, !arg.read_only, names.back()});
    }
    if (std::string why = ordering_operation(spec.stream, spec.kernel_name, uses); !why.empty())
      return api_fail(cudaErrorLaunchFailure, why);
  }
  ScopedDeviceAccess access;  // kernels may touch any device block
  const dim3 g = spec.grid;
  const std::uint64_t n_blocks = std::uint64_t{g.x} * g.y * g.z;
  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex failure_mutex;
  std::uint64_t failed_block = n_blocks;
  std::string failure;

  const std::function<void(int)> work = [&](int worker) {
    BlockRunner& runner = BlockRunner::this_thread();
    while (!failed.load(std::memory_order_relaxed)) {
      const std::uint64_t b = next.fetch_add(1);
      if (b >= n_blocks) return;
      const uint3 idx{static_cast<unsigned>(b % g.x), static_cast<unsigned>(b / g.x % g.y),
                      static_cast<unsigned>(b / (std::uint64_t{g.x} * g.y))};
      std::string why = runner.run_block(spec, idx, worker);
      if (!why.empty()) {
        std::lock_guard lock(failure_mutex);
        if (b < failed_block) {  // report the lowest failing block for a stable message
          failed_block = b;
          failure = "block " + dims(dim3(idx.x, idx.y, idx.z)) + " of grid " + dims(g) +
                    ", blockDim " + dims(spec.block) + ": " + why;
        }
        failed.store(true);
      }
    }
  };
  const int workers = static_cast<int>(std::min<std::uint64_t>(worker_threads(), n_blocks));
  if (workers == 1) {
    work(0);
  } else {
    WorkerPool::instance().run(workers, work);
  }
  if (failed.load()) return api_fail(cudaErrorLaunchFailure, failure);
  return api_ok();
}

}  // namespace kvheap::sim
