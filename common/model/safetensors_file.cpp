// Opening one .safetensors file: the length-prefixed JSON header, and the checks that it
// describes the data region the way the format requires.
#include "common/model/safetensors_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace kvheap {

static_assert(std::endian::native == std::endian::little,
              "the safetensors header length is a little-endian uint64");

std::optional<std::vector<std::uint64_t>> json_uint_array(const nlohmann::json& j) {
  if (!j.is_array()) return std::nullopt;
  std::vector<std::uint64_t> out;
  for (const nlohmann::json& v : j) {
    if (!v.is_number_unsigned()) return std::nullopt;
    out.push_back(v.get<std::uint64_t>());
  }
  return out;
}

using nlohmann::json;

TensorExtent tensor_extent(const SafetensorsFile& s, const std::string& name, const json& entry) {
  const std::string where = fmt::format("tensor '{}' in '{}'", name, s.path());
  if (!entry.is_object()) throw InputError(where + " has a header entry that is not an object");
  const auto offsets = json_uint_array(entry.value("data_offsets", json()));
  if (!offsets || offsets->size() != 2)
    throw InputError(where + " has no \"data_offsets\" pair of non-negative integers");
  TensorExtent e{(*offsets)[0], (*offsets)[1], name};
  if (e.begin > e.end)
    throw InputError(
        fmt::format("{} has data_offsets [{}, {}], which end before they begin; "
                    "expected [begin, end] with begin <= end",
                    where, e.begin, e.end));
  // Past the end of the file's bytes: the header describes more data than the file holds.
  if (e.end > s.data_size)
    throw InputError(fmt::format(
        "{} has data_offsets [{}, {}] past the {}-byte data region: the file is truncated, or its "
        "header is wrong (it needs at least {} bytes of data)",
        where, e.begin, e.end, s.data_size, e.end));
  return e;
}

namespace {

/// The safetensors format requires the tensors' byte ranges to cover the data region exactly.
/// An overlap means two tensors read the same bytes, and a gap or a tail means bytes no tensor
/// owns: either way the header does not describe the data, so the file is corrupt.
void check_data_region(const SafetensorsFile& s) {
  std::vector<TensorExtent> extents;
  for (const auto& [name, entry] : s.header.items())
    if (name != kSafetensorsMetadataKey) extents.push_back(tensor_extent(s, name, entry));
  std::sort(extents.begin(), extents.end(), [](const TensorExtent& a, const TensorExtent& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const TensorExtent* prev = nullptr;
  std::uint64_t covered = 0;  // end of the bytes the tensors so far own
  for (const TensorExtent& e : extents) {
    if (e.begin < covered)
      throw InputError(
          fmt::format("safetensors file '{}': tensors '{}' (data_offsets [{}, {}]) and '{}' "
                      "([{}, {}]) overlap; expected each byte of the data region to belong to "
                      "one tensor",
                      s.path(), prev->name, prev->begin, prev->end, e.name, e.begin, e.end));
    if (e.begin > covered)
      throw InputError(
          fmt::format("safetensors file '{}': bytes [{}, {}) of the data region belong to no "
                      "tensor (the next, '{}', starts at {}); expected the tensors' "
                      "data_offsets to cover the data region without gaps",
                      s.path(), covered, e.begin, e.name, e.begin));
    covered = e.end;
    prev = &e;
  }
  if (covered != s.data_size)
    throw InputError(
        fmt::format("safetensors file '{}' has {} bytes after the last tensor's data (the "
                    "tensors cover {} of the {}-byte data region); expected the file to end "
                    "there",
                    s.path(), s.data_size - covered, covered, s.data_size));
}

}  // namespace

SafetensorsFile open_safetensors(const std::string& path) {
  SafetensorsFile s;
  s.file = std::make_unique<MappedFile>(path);
  const std::uint64_t size = s.file->size();
  if (size < 8)
    throw InputError(
        fmt::format("safetensors file '{}' truncated: {} bytes is too short for the "
                    "8-byte header length",
                    s.path(), size));
  std::uint64_t n = 0;
  std::memcpy(&n, s.file->data(), 8);
  if (n > kMaxSafetensorsHeaderBytes)
    throw InputError(
        fmt::format("safetensors file '{}' declares a {}-byte JSON header, over the "
                    "{}-byte limit; the file is corrupt or not safetensors",
                    s.path(), n, kMaxSafetensorsHeaderBytes));
  if (n > size - 8)
    throw InputError(
        fmt::format("safetensors file '{}' declares a {}-byte JSON header but only {} "
                    "bytes follow the length field",
                    s.path(), n, size - 8));
  const auto* text = reinterpret_cast<const char*>(s.file->data() + 8);
  try {
    s.header = json::parse(text, text + n);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw InputError(
        fmt::format("header of safetensors file '{}' is not valid JSON: {}", s.path(), e.what()));
  }
  if (!s.header.is_object())
    throw InputError(fmt::format("header of safetensors file '{}' must be a JSON object, got {}",
                                 s.path(), s.header.type_name()));
  s.data = s.file->data() + 8 + n;
  s.data_size = size - 8 - n;
  check_data_region(s);
  return s;
}

}  // namespace kvheap
