#include "common/backend.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "common/forward_cpu.hpp"
#include "common/sampler.hpp"

namespace kvheap {
namespace {

/// Chapter 1's forward pass (Eigen and the CPU twins) over host-memory caches.
class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelWeights& weights, const BackendConfig& config)
      : Backend(fmt::format("cpu ({} threads)", config.threads),
                config.measure_peak ? cpu_read_peak() : MeasuredPeak{}, DType::F32),
        forward_(weights) {}

  std::span<const float> forward(const Batch& batch, KVCache& cache) override {
    return forward_.forward(batch, cache);
  }

  std::vector<int> forward_greedy(const Batch& batch, KVCache& cache) override {
    const std::span<const float> logits = forward_.forward(batch, cache);
    const auto vocab = static_cast<std::size_t>(forward_.weights().config.vocab_size);
    std::vector<int> ids(logits.size() / vocab);
    for (std::size_t j = 0; j < ids.size(); ++j) ids[j] = argmax(logits.subspan(j * vocab, vocab));
    return ids;
  }

  [[nodiscard]] Memory memory() const override { return Memory::kHost; }

 private:
  CpuForward forward_;
};

}  // namespace

std::string resolve_device(const std::string& requested) {
  if (requested != "auto" && requested != "cpu" && requested != "cuda")
    throw UsageError(fmt::format("--device {}: expected auto, cpu or cuda", requested));
  if (requested == "auto") return cuda_device_available() ? "cuda" : "cpu";
  return requested;
}

std::unique_ptr<Backend> make_backend(const ModelWeights& weights, const BackendConfig& config) {
  if (config.device == "cuda") return make_cuda_backend(weights, config);
  if (config.device != "cpu")
    throw UsageError(fmt::format("--device {}: expected cpu or cuda", config.device));
  if (config.weights != DType::F32)
    throw UsageError(
        fmt::format("--weight-dtype {} needs --device cuda: the CPU backend computes "
                    "with fp32 weights",
                    dtype_name(config.weights)));
  return std::make_unique<CpuBackend>(weights, config);
}

}  // namespace kvheap
