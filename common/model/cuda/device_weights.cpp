// Uploading a model: fp32 tensors go straight from the host copy, fp16/bf16 matrices are narrowed
// chunk by chunk into a pinned staging buffer and copied from there.
#include "common/model/cuda/device_weights.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

#include "base/error.hpp"
#include "base/half.hpp"

namespace kvheap {
namespace {

// 4 Mi elements (8 MiB of fp16/bf16): large enough that the per-chunk synchronisation is noise
// next to the copy, small enough to be irrelevant next to any model.
constexpr std::size_t kStagingElements = std::size_t{1} << 22;

/// Uploads tensors one at a time, counting bytes. The staging buffer lives only as long as the
/// upload: pinned memory is a scarce resource of the whole machine.
class Uploader {
 public:
  explicit Uploader(DType dtype) : dtype_(dtype) {
    if (dtype_ != DType::F32) staging_ = PinnedBuffer<std::uint16_t>(kStagingElements);
  }

  DeviceMatrix matrix(const float* host, int rows, int cols, const std::string& name) {
    if (host == nullptr) throw InputError(fmt::format("weights: tensor {} is missing", name));
    DeviceMatrix m;
    m.dtype = dtype_;
    m.rows = rows;
    m.cols = cols;
    const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
    m.storage = DeviceBuffer<std::byte>(count * dtype_size(dtype_));
    if (dtype_ == DType::F32) {
      m.storage.upload(std::as_bytes(std::span<const float>(host, count)));
    } else {
      for (std::size_t begin = 0; begin < count; begin += kStagingElements) {
        const std::size_t n = std::min(kStagingElements, count - begin);
        narrow(host + begin, n);
        m.storage.upload(std::as_bytes(std::span<const std::uint16_t>(staging_.data(), n)),
                         begin * sizeof(std::uint16_t));
        // The copy reads the pinned buffer asynchronously: finish it before refilling.
        KVHEAP_CUDA_CHECK(cudaStreamSynchronize(nullptr));
      }
    }
    bytes_ += m.storage.bytes();
    return m;
  }

  // Norm gains and biases, fp32. A null `host` gives an empty buffer when the tensor is optional.
  DeviceBuffer<float> vector(const float* host, int count, const std::string& name,
                             bool optional = false) {
    if (host == nullptr) {
      if (optional) return {};
      throw InputError(fmt::format("weights: tensor {} is missing", name));
    }
    auto b = DeviceBuffer<float>::from_host(std::span<const float>(host, count));
    bytes_ += b.bytes();
    return b;
  }

  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  void narrow(const float* src, std::size_t n) {
    std::uint16_t* dst = staging_.data();
    const bool f16 = dtype_ == DType::F16;
    const auto count = static_cast<long>(n);
#pragma omp parallel for if (count >= (1L << 16))
    for (long i = 0; i < count; ++i) dst[i] = f16 ? float_to_fp16(src[i]) : float_to_bf16(src[i]);
  }

  DType dtype_;
  PinnedBuffer<std::uint16_t> staging_;  // [kStagingElements] fp16/bf16 bits
  std::size_t bytes_ = 0;
};

}  // namespace

DeviceWeights::DeviceWeights(const ModelWeights& weights, DType matrix_dtype)
    : config_(weights.config), dtype_(matrix_dtype) {
  const ModelConfig& c = config_;
  c.validate();
  if (static_cast<int>(weights.layers.size()) != c.n_layers)
    throw InputError(fmt::format("weights: {} layers present, the config has {}",
                                 weights.layers.size(), c.n_layers));
  Uploader up(dtype_);
  embedding_ = up.matrix(weights.token_embedding, c.vocab_size, c.dim, "token_embedding");
  // Tied when the loader made both names point at one tensor; then the table is uploaded once.
  tied_ = weights.classifier == weights.token_embedding;
  if (!tied_) classifier_ = up.matrix(weights.classifier, c.vocab_size, c.dim, "classifier");
  final_norm_ = up.vector(weights.final_norm, c.dim, "final_norm");

  layers_.resize(static_cast<std::size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& src = weights.layers[l];
    DeviceLayerWeights& dst = layers_[l];
    const auto name = [l](const char* tensor) { return fmt::format("layers.{}.{}", l, tensor); };
    dst.attn_norm = up.vector(src.attn_norm, c.dim, name("attn_norm"));
    dst.wq = up.matrix(src.wq, c.q_dim(), c.dim, name("wq"));
    dst.wk = up.matrix(src.wk, c.kv_dim(), c.dim, name("wk"));
    dst.wv = up.matrix(src.wv, c.kv_dim(), c.dim, name("wv"));
    dst.wo = up.matrix(src.wo, c.dim, c.q_dim(), name("wo"));
    // Biases are uploaded whenever the weights carry them, like CpuForward adds them whenever
    // they are there; a config that promises them must deliver them.
    const bool need_bias = c.attention_bias;
    dst.bq = up.vector(src.bq, c.q_dim(), name("bq"), !need_bias);
    dst.bk = up.vector(src.bk, c.kv_dim(), name("bk"), !need_bias);
    dst.bv = up.vector(src.bv, c.kv_dim(), name("bv"), !need_bias);
    if (c.qk_norm) {  // Qwen3; GpuForward applies them exactly when the config says so
      dst.q_norm = up.vector(src.q_norm, c.head_dim, name("q_norm"));
      dst.k_norm = up.vector(src.k_norm, c.head_dim, name("k_norm"));
    }
    dst.ffn_norm = up.vector(src.ffn_norm, c.dim, name("ffn_norm"));
    dst.w1 = up.matrix(src.w1, c.hidden_dim, c.dim, name("w1"));
    dst.w2 = up.matrix(src.w2, c.dim, c.hidden_dim, name("w2"));
    dst.w3 = up.matrix(src.w3, c.hidden_dim, c.dim, name("w3"));
  }
  bytes_ = up.bytes();
}

}  // namespace kvheap
