// Writes GGUF files for tests: metadata of any type, tensors of raw bytes, any version and
// alignment, so that a test can build a valid file and then break exactly one thing in it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvheap::test {

/// \brief A GGUF file being put together, written out by bytes().
class GgufWriter {
 public:
  /// \brief A u32 value.
  void u32(const std::string& key, std::uint32_t v);
  /// \brief An f32 value.
  void f32(const std::string& key, float v);
  /// \brief A bool value.
  void boolean(const std::string& key, bool v);
  /// \brief A string value.
  void string(const std::string& key, const std::string& v);
  /// \brief An array of strings.
  void strings(const std::string& key, const std::vector<std::string>& v);
  /// \brief An array of i32 values.
  void i32s(const std::string& key, const std::vector<std::int32_t>& v);
  /// \brief An array of f32 values.
  void f32s(const std::string& key, const std::vector<float>& v);
  /// \brief A key with a raw value: its type id and the bytes that follow it.
  void raw(const std::string& key, std::uint32_t type, const std::string& value);
  /// \brief A tensor of ggml type `type` and shape `dims` (fastest first) holding `data`.
  void tensor(const std::string& name, std::vector<std::uint64_t> dims, std::uint32_t type,
              std::string data);
  /// \brief Removes the tensor `name` (a test's way to make a file lack one).
  void drop_tensor(const std::string& name);
  /// \brief The file: header, metadata, tensor infos (offsets packed at `alignment`) and data.
  [[nodiscard]] std::string bytes(std::uint32_t version = 3, std::uint64_t alignment = 32) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> dims;
    std::uint32_t type;
    std::string data;
  };
  std::vector<std::string> kv_;  // each key, its type and its value, encoded
  std::vector<Tensor> tensors_;
};

/// \brief The bytes of `v`, little-endian, for GgufWriter::raw and hand-made files.
template <class T>
std::string le_bytes(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}

/// \brief A GGUF string: its u64 length, then its bytes.
std::string gguf_string(const std::string& s);

/// \brief A valid GGUF file of a tiny model of architecture `arch` (llama, qwen2 with q/k/v
/// biases, or qwen3 with q/k norms): dim 8, FFN 16, one layer, two heads of 4 and one KV head,
/// vocabulary 8, context 16, F32 tensors of small values, a gpt2 tokenizer of the bytes 'a' to
/// 'h' and no merges. Tests add keys and tensors to it before taking the bytes.
[[nodiscard]] GgufWriter tiny_model_gguf(const std::string& arch = "llama");

}  // namespace kvheap::test
