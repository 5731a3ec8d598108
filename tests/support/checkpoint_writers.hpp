// Test-only checkpoint writers: the inverse of the loaders, so tests can round-trip known weights
// through every on-disk format and craft malformed files byte by byte.
//
// These write what the loaders read and nothing more: they are not exporters for real use.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "common/model/model_config.hpp"
#include "common/model/weights.hpp"

namespace kvheap::test {

/// \brief The tiny preset as a Qwen3 export would describe it: per-head q/k norms, RoPE on
/// halves with base 1e6, rms_norm_eps 1e-6, and head_dim 32, so that q_dim (128) is twice dim (64)
/// as in Qwen3-0.6B (2048 and 1024) and a shape that assumes dim / n_heads fails. Stop id 2.
[[nodiscard]] ModelConfig tiny_qwen3_config();

/// \brief Weights of shape `c` with every tensor (biases, q/k norm gains and an untied classifier
/// included when the config asks for them) filled with deterministic values in [-0.5, 0.5] from
/// `seed`.
///
/// Small and test-only; the synthetic model programs use common/synthetic_weights instead.
[[nodiscard]] ModelWeights random_weights(const ModelConfig& c, std::uint64_t seed);

/// \brief One tensor of a model under its Hugging Face name.
struct NamedTensor {
  std::string name;                  ///< e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<std::uint64_t> shape;  ///< row-major, e.g. {q_dim, dim}
  const float* data = nullptr;       ///< [product of shape]

  /// \brief Number of elements: the product of shape.
  [[nodiscard]] std::size_t numel() const;
};

/// \brief Every tensor of `w` in a fixed order, q/k/v biases and Qwen3's q_norm/k_norm gains only
/// when the config has them and lm_head.weight only when the classifier is untied. Two models
/// compare equal tensor by tensor when their lists do.
[[nodiscard]] std::vector<NamedTensor> hf_tensors(const ModelWeights& w);

/// \brief Writes `w` as a llama2.c checkpoint: version 0 (headerless, negative vocab_size for an
/// untied classifier, zero-filled RoPE tables) or version 1 ("ak42" header, 256 bytes). The format
/// has no biases or q/k norms: a config with either throws std::invalid_argument.
void write_llama2c(const ModelWeights& w, const std::string& path, int version);

/// \brief The config.json a Hugging Face export of `c` would carry (model_type "qwen3" when the
/// config has q/k norms, "qwen2" when it has attention biases, "llama" otherwise).
[[nodiscard]] nlohmann::json hf_config_json(const ModelConfig& c);

/// \brief Writes `w` as a Hugging Face folder: config.json plus model.safetensors, or, when
/// `shards` > 1, model-0000i-of-0000K.safetensors files and model.safetensors.index.json. Tensors
/// are narrowed to `dtype` with round-to-nearest-even.
void write_safetensors(const ModelWeights& w, const std::string& dir, DType dtype = DType::F32,
                       int shards = 1);

/// \brief What a reader gets back after `x` was stored as `dtype` (x itself for F32).
[[nodiscard]] float stored_as(float x, DType dtype);

/// \brief Expects `got` to hold exactly (bit for bit) what `want` holds after storage as `stored`:
/// same tensor names and shapes, and each value equal to stored_as(want value, stored).
void expect_same_tensors(const ModelWeights& got, const ModelWeights& want,
                         DType stored = DType::F32);

/// \brief Runs `f` and returns the message of the InputError it throws; records a test failure
/// and returns "" when it throws nothing.
template <class F>
std::string input_error_of(F&& f) {
  try {
    (void)f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return {};
}

/// \brief Writes `bytes` to `path`, replacing it.
void write_bytes(const std::string& path, const std::string& bytes);
/// \brief The whole content of `path`.
[[nodiscard]] std::string read_bytes(const std::string& path);
/// \brief Parses the JSON file at `path`, lets `edit` change it, and writes it back.
void edit_json_file(const std::string& path, const std::function<void(nlohmann::json&)>& edit);
/// \brief Lets `edit` change the JSON header of a .safetensors file and rewrites the file with the
/// new header length; the data region is kept byte for byte.
void edit_safetensors_header(const std::string& path,
                             const std::function<void(nlohmann::json&)>& edit);

/// \brief A fresh directory under the system temp folder, unique per process and test, removed
/// with everything in it when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  /// \brief The directory itself.
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  /// \brief Path of `name` inside the directory, as a string for the loaders.
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace kvheap::test
