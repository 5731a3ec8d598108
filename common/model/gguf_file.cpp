#include "common/model/gguf_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "base/error.hpp"

namespace kvheap {

namespace {

constexpr int kMaxDims = 4;        // ggml's GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;  // arrays of arrays; GGUF writers use one level
constexpr std::uint64_t kMaxAlignment = 1u << 20;

/// Reads the parts of a GGUF file in order, checking each against the bytes left.
class Reader {
 public:
  Reader(std::span<const std::byte> bytes, const std::string& source)
      : bytes_(bytes), source_(source) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(fmt::format("GGUF file '{}': {}", source_, what));
  }

  /// Throws "truncated" unless `n` bytes are left for `what`.
  void need(std::uint64_t n, std::string_view what) const {
    if (n > bytes_.size() - pos_)
      fail(fmt::format("truncated: {} at byte {} needs {} bytes, but the file ends at byte {}",
                       what, pos_, n, bytes_.size()));
  }

  template <typename T>
  T get(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string string(std::string_view what) {
    const auto n = get<std::uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  [[nodiscard]] std::size_t pos() const { return pos_; }
  [[nodiscard]] std::size_t size() const { return bytes_.size(); }

 private:
  std::span<const std::byte> bytes_;
  const std::string& source_;
  std::size_t pos_ = 0;
};

/// Smallest number of bytes an element of type `t` takes, so a count can be checked against
/// the bytes left before anything is reserved.
std::uint64_t min_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::Bool: return 1;
    case GgufType::U16:
    case GgufType::I16: return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32: return 4;
    case GgufType::Array: return 12;
    case GgufType::String:
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64: return 8;
  }
  return 1;
}

GgufType value_type(Reader& r, std::uint32_t raw, std::string_view key) {
  if (raw > static_cast<std::uint32_t>(GgufType::F64))
    r.fail(fmt::format("key '{}' has value type {}, which GGUF does not define (0-12)", key, raw));
  return static_cast<GgufType>(raw);
}

GgufValue read_value(Reader& r, GgufType type, std::string_view key, int depth) {
  GgufValue v;
  v.type = type;
  const std::string what = fmt::format("the value of key '{}'", key);
  switch (type) {
    case GgufType::U8: v.i = r.get<std::uint8_t>(what); break;
    case GgufType::I8: {  // two's complement, read as a byte
      const int b = r.get<std::uint8_t>(what);
      v.i = b < 128 ? b : b - 256;
      break;
    }
    case GgufType::U16: v.i = r.get<std::uint16_t>(what); break;
    case GgufType::I16: v.i = r.get<std::int16_t>(what); break;
    case GgufType::U32: v.i = r.get<std::uint32_t>(what); break;
    case GgufType::I32: v.i = r.get<std::int32_t>(what); break;
    case GgufType::I64: v.i = r.get<std::int64_t>(what); break;
    case GgufType::U64:
      v.u = r.get<std::uint64_t>(what);
      v.i = v.u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
                ? std::numeric_limits<std::int64_t>::max()
                : static_cast<std::int64_t>(v.u);
      break;
    case GgufType::F32: v.f = r.get<float>(what); break;
    case GgufType::F64: v.f = r.get<double>(what); break;
    case GgufType::Bool: {
      const auto b = r.get<std::uint8_t>(what);
      if (b > 1) r.fail(fmt::format("key '{}' is a bool holding {}, not 0 or 1", key, b));
      v.i = b;
      break;
    }
    case GgufType::String: v.s = r.string(what); break;
    case GgufType::Array: {
      if (depth >= kMaxArrayDepth)
        r.fail(fmt::format("key '{}' nests arrays deeper than {}", key, kMaxArrayDepth));
      v.elem_type = value_type(r, r.get<std::uint32_t>(what), key);
      const auto n = r.get<std::uint64_t>(what);
      if (n > (r.size() - r.pos()) / min_bytes(v.elem_type))
        r.fail(
            fmt::format("truncated: key '{}' is an array of {} {} values, more than the {} "
                        "bytes left in the file can hold",
                        key, n, gguf_type_name(v.elem_type), r.size() - r.pos()));
      v.array.reserve(n);
      for (std::uint64_t k = 0; k < n; ++k)
        v.array.push_back(read_value(r, v.elem_type, key, depth + 1));
      break;
    }
  }
  return v;
}

std::string shape_text(const std::vector<std::uint64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  constexpr std::string_view names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<std::size_t>(t);
  return i < std::size(names) ? names[i] : "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::U16:
    case GgufType::I16:
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::U64:
    case GgufType::I64: return true;
    default: return false;
  }
}

std::uint64_t GgufTensor::elements() const {
  std::uint64_t n = 1;
  for (const std::uint64_t d : dims) n *= d;
  return n;
}

GgufFile::GgufFile(const std::string& path)
    : mapping_(std::make_shared<MappedFile>(path)), source_(path) {
  parse({mapping_->data(), mapping_->size()});
}

GgufFile::GgufFile(std::span<const std::byte> bytes, std::string source)
    : source_(std::move(source)) {
  parse(bytes);
}

void GgufFile::parse(std::span<const std::byte> bytes) {
  Reader r(bytes, source_);
  r.need(4, "the magic");
  if (std::memcmp(bytes.data(), "GGUF", 4) != 0) {
    const std::string head(reinterpret_cast<const char*>(bytes.data()), 4);
    const bool printable =
        std::all_of(head.begin(), head.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    r.fail(
        fmt::format("the file starts with {} instead of the magic \"GGUF\"; expected a GGUF "
                    "model file",
                    printable ? fmt::format("\"{}\"", head) : std::string("other bytes")));
  }
  (void)r.get<std::uint32_t>("the magic");
  version_ = r.get<std::uint32_t>("the version");
  if (version_ != 2 && version_ != 3)
    r.fail(fmt::format("version {}; kvheap reads GGUF versions 2 and 3", version_));
  const auto n_tensors = r.get<std::uint64_t>("the tensor count");
  const auto n_keys = r.get<std::uint64_t>("the metadata count");
  // A key takes at least 12 bytes (length and type), a tensor info at least 24.
  if (n_keys > (r.size() - r.pos()) / 12)
    r.fail(
        fmt::format("truncated: the header counts {} metadata keys, more than the {} bytes "
                    "left in the file can hold",
                    n_keys, r.size() - r.pos()));
  metadata_.reserve(n_keys);
  for (std::uint64_t k = 0; k < n_keys; ++k) {
    std::string key = r.string(fmt::format("the name of metadata key {}", k));
    if (!key_index_.emplace(key, metadata_.size()).second)
      r.fail(fmt::format("key '{}' appears twice", key));
    const GgufType t = value_type(r, r.get<std::uint32_t>("a value type"), key);
    GgufValue v = read_value(r, t, key, 0);
    metadata_.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = find("general.alignment")) {
    if (!a->is_integer() || a->i <= 0 || a->i > static_cast<std::int64_t>(kMaxAlignment) ||
        (a->i & (a->i - 1)) != 0)
      r.fail(fmt::format("general.alignment must be a power of two up to {}", kMaxAlignment));
    alignment_ = static_cast<std::uint64_t>(a->i);
  }
  if (n_tensors > (r.size() - r.pos()) / 24)
    r.fail(
        fmt::format("truncated: the header counts {} tensors, more than the {} bytes left in "
                    "the file can hold",
                    n_tensors, r.size() - r.pos()));
  tensors_.reserve(n_tensors);
  for (std::uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = r.string(fmt::format("the name of tensor {}", k));
    if (!tensor_index_.emplace(t.name, tensors_.size()).second)
      r.fail(fmt::format("tensor '{}' appears twice", t.name));
    const auto n_dims = r.get<std::uint32_t>(fmt::format("tensor '{}'", t.name));
    if (n_dims < 1 || n_dims > kMaxDims)
      r.fail(fmt::format("tensor '{}' has {} dimensions; GGUF allows 1 to {}", t.name, n_dims,
                         kMaxDims));
    for (std::uint32_t d = 0; d < n_dims; ++d)
      t.dims.push_back(r.get<std::uint64_t>(fmt::format("tensor '{}'", t.name)));
    t.type = r.get<std::uint32_t>(fmt::format("tensor '{}'", t.name));
    t.offset = r.get<std::uint64_t>(fmt::format("tensor '{}'", t.name));
    tensors_.push_back(std::move(t));
  }
  const std::uint64_t data_start = (r.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (data_start > r.size() && !tensors_.empty())
    r.fail(
        fmt::format("truncated: the data region would start at byte {}, but the file ends at "
                    "byte {}",
                    data_start, r.size()));
  const std::uint64_t data_size = data_start > r.size() ? 0 : r.size() - data_start;
  for (GgufTensor& t : tensors_) {
    const std::string name = ggml_type_name(t.type);
    if (!ggml_type_supported(t.type))
      r.fail(
          fmt::format("tensor '{}' has type {}{}; kvheap reads F32, F16, BF16, Q4_0, Q4_1, "
                      "Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K",
                      t.name, name.empty() ? fmt::format("id {}", t.type) : name,
                      name.empty() ? ", which ggml does not define" : ""));
    const GgmlTypeLayout l = ggml_type_layout(static_cast<GgmlType>(t.type));
    std::uint64_t rows = 1;
    for (std::size_t d = 0; d < t.dims.size(); ++d) {
      if (t.dims[d] == 0 || t.dims[d] > (std::uint64_t{1} << 40))
        r.fail(fmt::format("tensor '{}' has shape {}; every dimension must be 1 to 2^40", t.name,
                           shape_text(t.dims)));
      if (d > 0) rows *= t.dims[d];
      if (rows > (std::uint64_t{1} << 40))
        r.fail(fmt::format("tensor '{}' has shape {}, over 2^40 rows", t.name, shape_text(t.dims)));
    }
    if (t.dims[0] % l.block != 0)
      r.fail(
          fmt::format("tensor '{}' has rows of {} values, not a whole number of {}'s blocks of "
                      "{}",
                      t.name, t.dims[0], name, l.block));
    t.bytes = t.dims[0] / l.block * l.block_bytes * rows;
    if (t.offset % alignment_ != 0)
      r.fail(
          fmt::format("tensor '{}' starts at data offset {}, not a multiple of the alignment "
                      "{}",
                      t.name, t.offset, alignment_));
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      r.fail(
          fmt::format("truncated: tensor '{}' ({} {}, {} bytes) at data offset {} runs past "
                      "the end of the file, whose data region holds {} bytes",
                      t.name, name, shape_text(t.dims), t.bytes, t.offset, data_size));
    t.data = bytes.data() + data_start + t.offset;
  }
  std::vector<const GgufTensor*> by_offset;
  for (const GgufTensor& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (std::size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensor& a = *by_offset[k - 1];
    const GgufTensor& b = *by_offset[k];
    if (a.offset + a.bytes > b.offset)
      r.fail(
          fmt::format("tensors '{}' (bytes {} to {}) and '{}' (from byte {}) overlap in the "
                      "data region",
                      a.name, a.offset, a.offset + a.bytes, b.name, b.offset));
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = key_index_.find(std::string(key));
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

[[noreturn]] void wrong_type(const std::string& source, std::string_view key, const GgufValue& v,
                             std::string_view expected) {
  throw InputError(fmt::format("GGUF file '{}': key '{}' is a {}; expected {}", source, key,
                               gguf_type_name(v.type), expected));
}

}  // namespace

std::int64_t GgufFile::require_int(std::string_view key, std::int64_t lo, std::int64_t hi) const {
  const GgufValue* v = find(key);
  if (v == nullptr)
    throw InputError(fmt::format("GGUF file '{}': the required key '{}' is missing", source_, key));
  return int_or(key, 0, lo, hi);
}

std::int64_t GgufFile::int_or(std::string_view key, std::int64_t fallback, std::int64_t lo,
                              std::int64_t hi) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_integer()) wrong_type(source_, key, *v, "an integer");
  if (v->i < lo || v->i > hi || (v->type == GgufType::U64 && v->u > static_cast<std::uint64_t>(hi)))
    throw InputError(fmt::format(
        "GGUF file '{}': key '{}' is {}; expected {} to {}", source_, key,
        v->type == GgufType::U64 ? fmt::to_string(v->u) : fmt::to_string(v->i), lo, hi));
  return v->i;
}

double GgufFile::float_or(std::string_view key, double fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return fallback;
  if (v->type == GgufType::F32 || v->type == GgufType::F64) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  wrong_type(source_, key, *v, "a number");
}

bool GgufFile::bool_or(std::string_view key, bool fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufType::Bool) wrong_type(source_, key, *v, "a bool");
  return v->i != 0;
}

const std::string& GgufFile::require_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr)
    throw InputError(fmt::format("GGUF file '{}': the required key '{}' is missing", source_, key));
  if (v->type != GgufType::String) wrong_type(source_, key, *v, "a string");
  return v->s;
}

std::string GgufFile::string_or(std::string_view key) const {
  return find(key) == nullptr ? std::string() : require_string(key);
}

std::vector<std::string_view> GgufFile::strings(std::string_view key, bool required) const {
  const GgufValue* v = find(key);
  if (v == nullptr) {
    if (required)
      throw InputError(
          fmt::format("GGUF file '{}': the required key '{}' is missing", source_, key));
    return {};
  }
  if (v->type != GgufType::Array || v->elem_type != GgufType::String)
    wrong_type(source_, key, *v, "an array of strings");
  std::vector<std::string_view> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.emplace_back(e.s);
  return out;
}

std::vector<double> GgufFile::numbers(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return {};
  if (v->type != GgufType::Array || v->elem_type == GgufType::String ||
      v->elem_type == GgufType::Array || v->elem_type == GgufType::Bool)
    wrong_type(source_, key, *v, "an array of numbers");
  std::vector<double> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array)
    out.push_back(e.type == GgufType::F32 || e.type == GgufType::F64 ? e.f
                                                                     : static_cast<double>(e.i));
  return out;
}

}  // namespace kvheap
