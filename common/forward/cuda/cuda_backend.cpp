// The CUDA backend: GpuForward (cuBLAS and the CUDA kernels, or the simulator of them) over
// device-memory caches.
#include <chrono>
#include <memory>

#include "common/forward/backend.hpp"
#include "common/measure/cuda/device_bandwidth.hpp"
#include "common/forward/cuda/forward_gpu.hpp"
#include "device/device.hpp"

namespace kvheap {
namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend(const ModelWeights& weights, const BackendConfig& config, const DeviceInfo& info)
      : Backend(
            {.device_name =
                 info.is_simulator ? info.name + " (not a performance model)" : info.name,
             .peak = config.measure_peak && !info.is_simulator ? gpu_copy_peak() : MeasuredPeak{},
             .weight_dtype = config.weights,
             .products = info.is_simulator ? "the simulator's Eigen product" : "cuBLAS"}),
        forward_(weights, config.weights) {
    set_setup_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

  void prepare(const Batch& batch, KVCache& cache) override { forward_.prepare(batch, cache); }
  std::span<const SampledToken> forward(const Batch& batch, KVCache& cache,
                                        std::span<const SamplingJob> jobs) override {
    return forward_.forward(batch, cache, jobs);
  }
  std::span<const float> logits() override { return forward_.logits(); }
  [[nodiscard]] PassTimes last_times() const override { return forward_.last_times(); }
  [[nodiscard]] Memory memory() const override { return Memory::kDevice; }

 private:
  std::chrono::steady_clock::time_point start_ =
      std::chrono::steady_clock::now();  // before forward_
  GpuForward forward_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const ModelWeights& weights,
                                           const BackendConfig& config) {
  const DeviceInfo info = require_cuda_device();  // ResourceError naming why there is none
  return std::make_unique<CudaBackend>(weights, config, info);
}

bool cuda_device_available() { return device_count() > 0; }

}  // namespace kvheap
