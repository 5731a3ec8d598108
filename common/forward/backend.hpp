// The backend factory: the forward pass, and the memory its caches keep K and V in, for
// --device cpu or cuda. A chapter program asks for one by name and never branches on the build.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/measure/bandwidth.hpp"
#include "common/cache/batch.hpp"
#include "common/cache/kv_cache.hpp"
#include "common/cache/kv_storage.hpp"
#include "common/model/weights.hpp"
#include "kernels/matmul.hpp"
#include "kernels/sample.hpp"

namespace kvheap {

/// \brief What to build a backend with.
struct BackendConfig {
  std::string device = "cpu";  ///< cpu or cuda (the CPU simulator in a sim build)
  DType weights = DType::F32;  ///< weight matrices as the forward pass reads them
  /// How the CPU backend multiplies bf16 weights (kernels/matmul.hpp); the CUDA one ignores it.
  cpu::Bf16Products bf16 = cpu::Bf16Products::kWiden;
  bool measure_peak = true;  ///< measure the bandwidth peak that reports compare against
  int threads = 1;           ///< CPU threads, for the device's description
};

/// \brief A forward pass over a KVCache, on the CPU (Eigen and the CPU twins) or a CUDA device
/// (cuBLAS and the CUDA kernels, or the simulator of them).
class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  /// \brief Lays out `cache` for `batch`: its prepare() (the blocks new positions need, copies on
  /// write, the view the kernels read), which a GPU stages in the pass's one upload. The next
  /// forward() must run this batch over this cache; a forward() without a prepare() just before
  /// it prepares itself. Throws InputError as forward() does for a bad row.
  virtual void prepare(const Batch& batch, KVCache& cache) = 0;
  /// \brief One forward pass, and one token per job chosen from its logit row
  /// (kernels/sample.hpp): [jobs.size()] in host memory owned by the backend, valid until the
  /// next pass. `cache` must keep its K and V in memory(). A GPU chooses them where the logits
  /// are, so 16 bytes a job cross to the host whatever the vocabulary. A job's negative token code
  /// (a NaN logit, say) is the caller's to report (checked_token).
  virtual std::span<const SampledToken> forward(const Batch& batch, KVCache& cache,
                                                std::span<const SamplingJob> jobs) = 0;
  /// \brief The last pass's logits, [num_logit_rows, vocab] in row order, valid until the next
  /// pass. A GPU downloads them here, on the first call after a pass: only for a caller that asks.
  virtual std::span<const float> logits() = 0;
  /// \brief Where the last pass's time went.
  [[nodiscard]] virtual PassTimes last_times() const = 0;

  /// \brief One forward pass that chooses nothing; its logits (tests and tools).
  std::span<const float> forward_logits(const Batch& batch, KVCache& cache) {
    (void)forward(batch, cache, {});
    return logits();
  }
  /// \brief Where this backend's caches keep K and V.
  [[nodiscard]] virtual Memory memory() const = 0;

  /// \brief "cpu (2 threads)", or the device's name (the simulator says it is not a GPU).
  [[nodiscard]] const std::string& device_name() const { return device_name_; }
  /// \brief The bandwidth peak measured at start (gbps 0 when not measured).
  [[nodiscard]] const MeasuredPeak& peak() const { return peak_; }
  /// \brief The weights' element type as the forward pass reads them.
  [[nodiscard]] DType weight_dtype() const { return weight_dtype_; }
  /// \brief How the weight products run ("cuBLAS", or the CPU kernel's loops: cpu::matmul_path).
  [[nodiscard]] const std::string& products() const { return products_; }
  /// \brief Seconds spent making the weights ready at construction (packing them on a CPU,
  /// uploading them to a GPU).
  [[nodiscard]] double setup_seconds() const { return setup_seconds_; }

 protected:
  /// \brief What a backend says of itself: the device's name, the peak measured on it, the
  /// weights' element type, and how its products run.
  struct Description {
    std::string device_name;          ///< device_name()
    MeasuredPeak peak;                ///< peak()
    DType weight_dtype = DType::F32;  ///< weight_dtype()
    std::string products;             ///< products()
  };
  /// \brief Keeps the backend's description.
  explicit Backend(Description d)
      : device_name_(std::move(d.device_name)),
        peak_(std::move(d.peak)),
        weight_dtype_(d.weight_dtype),
        products_(std::move(d.products)) {}
  /// \brief Records setup_seconds() (derived constructors, once their weights are ready).
  void set_setup_seconds(double s) { setup_seconds_ = s; }
  /// \brief For a backend that knows how its products run only once its weights are packed.
  void set_products(std::string p) { products_ = std::move(p); }

 private:
  std::string device_name_;
  MeasuredPeak peak_;
  DType weight_dtype_;
  std::string products_;
  double setup_seconds_ = 0;
};

/// \brief The backend for `config.device`. The weights must outlive a CPU backend; a CUDA one
/// uploads them. Throws UsageError for a device name other than cpu or cuda; ResourceError for cuda
/// in a build without CUDA code or without a device.
std::unique_ptr<Backend> make_backend(const ModelWeights& weights, const BackendConfig& config);

/// \brief --device auto|cpu|cuda: auto becomes cuda where a CUDA device is usable, else cpu.
/// Throws UsageError for any other name.
std::string resolve_device(const std::string& requested);

/// \brief The CUDA backend (common/forward/cuda/cuda_backend.cpp), or a ResourceError saying the
/// build has no CUDA code (common/forward/no_cuda.cpp). Called by make_backend.
std::unique_ptr<Backend> make_cuda_backend(const ModelWeights& weights,
                                           const BackendConfig& config);

/// \brief True when this build has CUDA code and a device it can use.
bool cuda_device_available();

}  // namespace kvheap
