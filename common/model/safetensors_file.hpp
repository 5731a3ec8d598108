// One .safetensors file, memory-mapped, with its header parsed and checked against the format.
//
// Layout: a little-endian uint64 N, N bytes of JSON mapping each tensor name to its dtype, shape
// and [begin, end) byte range, then the data region those ranges index into. The format requires
// the ranges to cover the data region exactly, each byte belonging to one tensor; a header that
// does not is a corrupt file, whatever the tensors' names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/util/mapped_file.hpp"

namespace kvheap {

/// \brief Upper bound on a safetensors JSON header. Real headers are kilobytes to a few
/// megabytes; a larger length means a corrupt file or not a safetensors file at all.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

/// \brief The header key safetensors reserves for free-form metadata; it names no tensor.
inline constexpr const char* kSafetensorsMetadataKey = "__metadata__";

/// \brief One mapped .safetensors file with its parsed header.
struct SafetensorsFile {
  std::unique_ptr<MappedFile> file;  ///< the whole file, mapped read-only
  nlohmann::json header;             ///< {name: {dtype, shape, data_offsets}, "__metadata__": ...}
  const std::byte* data = nullptr;   ///< start of the data region; offsets are relative to it
  std::uint64_t data_size = 0;       ///< bytes in the data region
  /// \brief The file's path, for messages.
  [[nodiscard]] const std::string& path() const { return file->path(); }
};

/// \brief The [begin, end) byte range of one tensor, relative to its file's data region.
struct TensorExtent {
  std::uint64_t begin = 0;  ///< first byte
  std::uint64_t end = 0;    ///< one past the last byte
  std::string name;         ///< the tensor's name in the header
};

/// \brief The data_offsets of header entry `name` of `s`; throws InputError naming the tensor
/// and file when they are missing, malformed or outside the data region.
[[nodiscard]] TensorExtent tensor_extent(const SafetensorsFile& s, const std::string& name,
                                         const nlohmann::json& entry);

/// \brief Maps `path` and checks its header: a length that fits the file and the limit, a JSON
/// object, and tensors' data_offsets that lie inside the data region and tile it without overlaps,
/// gaps or trailing bytes. Throws InputError naming the file (and the tensors concerned).
[[nodiscard]] SafetensorsFile open_safetensors(const std::string& path);

/// \brief A JSON array of non-negative integers as a vector; nullopt when it is anything else.
[[nodiscard]] std::optional<std::vector<std::uint64_t>> json_uint_array(const nlohmann::json& j);

}  // namespace kvheap
