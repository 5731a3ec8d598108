#include "chapters/04_cow_prefix_sharing/shared_backend.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "chapters/04_cow_prefix_sharing/shared_host_cache.hpp"
#include "common/bandwidth.hpp"
#include "common/forward_cpu.hpp"

#if KVHEAP_HAS_CUDA
#include "chapters/04_cow_prefix_sharing/shared_gpu_cache.hpp"
#include "common/gpu/device_bandwidth.hpp"
#include "common/gpu/forward_gpu.hpp"
#include "device/device.hpp"
#endif

namespace kvheap::ch04 {

// Exactly one of the two pairs is set. The cache comes before the forward pass that uses it.
struct SharedBackend::Impl {
  std::unique_ptr<SharedHostCache> host_cache;
  std::unique_ptr<CpuForward> cpu;
#if KVHEAP_HAS_CUDA
  std::unique_ptr<SharedGpuCache> gpu_cache;
  std::unique_ptr<GpuForward> gpu;
#endif
};

SharedBackend::SharedBackend(const ModelWeights& weights, const SharedBackendConfig& cfg)
    : impl_(std::make_unique<Impl>()) {
  const ModelConfig& c = weights.config;
  if (cfg.device == "cpu") {
    if (cfg.weights != DType::F32)
      throw UsageError(
          fmt::format("--weight-dtype {} needs --device cuda: the CPU backend computes "
                      "with fp32 weights",
                      dtype_name(cfg.weights)));
    device_name_ = fmt::format("cpu ({} threads)", cfg.threads);
    if (cfg.measure_peak) {
      peak_ = cpu_read_peak();
    }
    impl_->host_cache = std::make_unique<SharedHostCache>(c, cfg.kv, cfg.num_blocks, cfg.block_size,
                                                          cfg.shuffle_seed, cfg.read_once);
    impl_->cpu = std::make_unique<CpuForward>(weights);
    return;
  }
  if (cfg.device != "cuda")
    throw UsageError(fmt::format("--device {}: expected cpu or cuda", cfg.device));
#if KVHEAP_HAS_CUDA
  const DeviceInfo info = require_cuda_device();
  device_name_ = info.is_simulator ? info.name + " (not a performance model)" : info.name;
  if (cfg.measure_peak && !info.is_simulator) {
    peak_ = gpu_copy_peak();
  }
  impl_->gpu_cache = std::make_unique<SharedGpuCache>(c, cfg.kv, cfg.num_blocks, cfg.block_size,
                                                      cfg.shuffle_seed, cfg.read_once);
  impl_->gpu = std::make_unique<GpuForward>(weights, cfg.weights);
#else
  throw ResourceError(
      "--device cuda: this build has no CUDA support (configured with KVHEAP_CUDA=off); "
      "rebuild with the cuda or sim preset, or use --device cpu");
#endif
}

SharedBackend::~SharedBackend() = default;

std::span<const float> SharedBackend::forward(const Batch& batch) {
#if KVHEAP_HAS_CUDA
  if (impl_->gpu) return impl_->gpu->forward(batch, *impl_->gpu_cache);
#endif
  return impl_->cpu->forward(batch, *impl_->host_cache);
}

SharedBlockManager& SharedBackend::blocks() {
#if KVHEAP_HAS_CUDA
  if (impl_->gpu_cache) return impl_->gpu_cache->blocks();
#endif
  return impl_->host_cache->blocks();
}

long SharedBackend::positions_read() const {
#if KVHEAP_HAS_CUDA
  if (impl_->gpu_cache) return impl_->gpu_cache->positions_read();
#endif
  return impl_->host_cache->positions_read();
}

std::size_t SharedBackend::bytes_reserved() const {
#if KVHEAP_HAS_CUDA
  if (impl_->gpu_cache) return impl_->gpu_cache->bytes_reserved();
#endif
  return impl_->host_cache->bytes_reserved();
}

std::size_t SharedBackend::bytes_used() const {
#if KVHEAP_HAS_CUDA
  if (impl_->gpu_cache) return impl_->gpu_cache->bytes_used();
#endif
  return impl_->host_cache->bytes_used();
}

}  // namespace kvheap::ch04
