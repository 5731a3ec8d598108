// GgufFile: a GGUF file (llama.cpp's format, versions 2 and 3) memory-mapped and checked: its
// metadata, every value type and arrays of them, and the tensor infos with their data.
//
// Layout: "GGUF", a version, the tensor and key counts; then each key (a string) with a typed
// value; then each tensor's name, shape (fastest dimension first), type and offset; then, at
// `general.alignment` (32 by default), the data region that the offsets point into. Every count,
// length and offset is checked against the file before it is used, so a truncated or corrupt
// file is an InputError naming the file and what is wrong, never a read past the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/model/gguf_quants.hpp"
#include "common/util/mapped_file.hpp"

namespace kvheap {

/// \brief The value types of GGUF metadata.
enum class GgufType : std::uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

/// \brief "u32", "string", "array" ...: the name of a value type, for messages.
[[nodiscard]] std::string_view gguf_type_name(GgufType t);

/// \brief One metadata value. Integers are held as int64 (a u64 above its range as `u`), floats
/// as double, arrays as their elements.
struct GgufValue {
  GgufType type = GgufType::U8;       ///< what the file stored
  GgufType elem_type = GgufType::U8;  ///< an array's element type
  std::int64_t i = 0;                 ///< integer and bool values
  std::uint64_t u = 0;                ///< a u64 value, whole
  double f = 0.0;                     ///< F32 and F64 values
  std::string s;                      ///< a string
  std::vector<GgufValue> array;       ///< an array's elements

  /// \brief True for the eight integer types.
  [[nodiscard]] bool is_integer() const;
};

/// \brief One tensor of the file, its data checked to lie in the data region.
struct GgufTensor {
  std::string name;                 ///< "blk.0.attn_q.weight"
  std::vector<std::uint64_t> dims;  ///< fastest first: [in_features, out_features] for a matrix
  std::uint32_t type = 0;           ///< a ggml type id (supported or not: see ggml_type_name)
  std::uint64_t offset = 0;         ///< from the start of the data region
  std::uint64_t bytes = 0;          ///< size of its data
  const std::byte* data = nullptr;  ///< its first byte in the mapping
  /// \brief Number of values: the product of dims.
  [[nodiscard]] std::uint64_t elements() const;
};

/// \brief A parsed GGUF file. Move-only; the tensors point into the mapping it holds.
class GgufFile {
 public:
  /// \brief Maps and parses `path`. Throws InputError naming the file for anything malformed: a
  /// wrong magic, a version other than 2 or 3, a count, string or array that runs past the end,
  /// a value type that does not exist, a repeated key or tensor, a tensor with more than four
  /// dimensions or a zero one, an unknown tensor type or one whose rows are not whole blocks, a
  /// data offset that is not aligned, that runs past the end or that overlaps another tensor.
  explicit GgufFile(const std::string& path);
  /// \brief Parses `bytes`, which the caller keeps alive; `source` names them in messages.
  GgufFile(std::span<const std::byte> bytes, std::string source);

  /// \brief The file's version, 2 or 3.
  [[nodiscard]] std::uint32_t version() const { return version_; }
  /// \brief The path, or the source given, for messages.
  [[nodiscard]] const std::string& source() const { return source_; }
  /// \brief The keys in file order.
  [[nodiscard]] const std::vector<std::pair<std::string, GgufValue>>& metadata() const {
    return metadata_;
  }
  /// \brief The value of `key`, or null.
  [[nodiscard]] const GgufValue* find(std::string_view key) const;
  /// \brief The tensors in file order.
  [[nodiscard]] const std::vector<GgufTensor>& tensors() const { return tensors_; }
  /// \brief The tensor named `name`, or null.
  [[nodiscard]] const GgufTensor* tensor(std::string_view name) const;
  /// \brief The alignment of the data region.
  [[nodiscard]] std::uint64_t alignment() const { return alignment_; }

  // Typed access. The require_ forms throw InputError naming the file and key when the key is
  // missing; every form throws when the value has another type or does not fit the result.

  /// \brief An integer value (any integer type) that fits [lo, hi].
  [[nodiscard]] std::int64_t require_int(std::string_view key, std::int64_t lo,
                                         std::int64_t hi) const;
  /// \brief As require_int, or `fallback` when the key is missing.
  [[nodiscard]] std::int64_t int_or(std::string_view key, std::int64_t fallback, std::int64_t lo,
                                    std::int64_t hi) const;
  /// \brief A float value (F32, F64 or an integer), or `fallback` when missing.
  [[nodiscard]] double float_or(std::string_view key, double fallback) const;
  /// \brief A bool value, or `fallback` when missing.
  [[nodiscard]] bool bool_or(std::string_view key, bool fallback) const;
  /// \brief A string value.
  [[nodiscard]] const std::string& require_string(std::string_view key) const;
  /// \brief A string value, or "" when missing.
  [[nodiscard]] std::string string_or(std::string_view key) const;
  /// \brief An array of strings; an empty list when missing and not `required`.
  [[nodiscard]] std::vector<std::string_view> strings(std::string_view key, bool required) const;
  /// \brief An array of numbers (integers or floats) as doubles; empty when missing.
  [[nodiscard]] std::vector<double> numbers(std::string_view key) const;

 private:
  void parse(std::span<const std::byte> bytes);

  std::shared_ptr<MappedFile> mapping_;
  std::string source_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, std::size_t> key_index_;     // key -> metadata_ index
  std::unordered_map<std::string, std::size_t> tensor_index_;  // name -> tensors_ index
};

}  // namespace kvheap
