#include "common/forward/backend.hpp"

#include <fmt/format.h>

#include <chrono>
#include <vector>

#include "base/error.hpp"
#include "common/forward/forward_cpu.hpp"

namespace kvheap {
namespace {

/// Chapter 1's forward pass (the packed matrix products and the CPU twins) over host-memory
/// caches.
class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelWeights& weights, const BackendConfig& config)
      : Backend({.device_name = fmt::format("cpu ({} threads)", config.threads),
                 .peak = config.measure_peak ? cpu_read_peak() : MeasuredPeak{},
                 .weight_dtype = config.weights,
                 .products = {}}),  // set below, once the weights are packed
        forward_(weights, config.weights, config.bf16) {
    set_setup_seconds(forward_.pack_seconds());
    // Named from the packed matrices, so that the report says what runs, not what was asked.
    set_products("packed panels, " +
                 cpu::matmul_path(forward_.weight_dtype(), forward_.bf16_products()));
  }

  void prepare(const Batch& batch, KVCache& cache) override {
    forward_.prepare(batch, cache);
    prepared_ = true;
  }

  std::span<const SampledToken> forward(const Batch& batch, KVCache& cache,
                                        std::span<const SamplingJob> jobs) override {
    const bool ahead = prepared_;  // else forward_ prepares, inside the time measured here
    prepared_ = false;
    using Clock = std::chrono::steady_clock;
    const auto seconds = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double>(b - a).count();
    };
    const Clock::time_point t0 = Clock::now();
    logits_ = forward_.forward(batch, cache);
    const Clock::time_point t1 = Clock::now();
    const int vocab = forward_.weights().config.vocab_size;
    picks_.resize(jobs.size());
    cpu::sample_rows(picks_.data(), logits_.data(), static_cast<int>(logits_.size() / vocab), vocab,
                     jobs.data(), static_cast<int>(jobs.size()));
    times_.prepare = forward_.prepare_seconds();
    times_.forward = seconds(t0, t1) - (ahead ? 0.0 : times_.prepare);
    times_.sample = seconds(t1, Clock::now());
    return picks_;
  }

  std::span<const float> logits() override { return logits_; }
  [[nodiscard]] PassTimes last_times() const override { return times_; }
  [[nodiscard]] Memory memory() const override { return Memory::kHost; }

 private:
  CpuForward forward_;
  std::span<const float> logits_;
  std::vector<SampledToken> picks_;
  PassTimes times_;
  bool prepared_ = false;
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
  return std::make_unique<CpuBackend>(weights, config);
}

}  // namespace kvheap
