// Hugging Face safetensors loader: shard discovery, header validation, and fp32 conversion.
//
// Tensors are checked when they are looked up, not when the header is read, so a checkpoint may
// carry extra tensors kvheap does not use (in any dtype) without being rejected.
#include "common/safetensors_loader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "common/error.hpp"
#include "common/half.hpp"
#include "common/hf_config.hpp"
#include "common/mapped_file.hpp"

namespace kvheap {

static_assert(std::endian::native == std::endian::little,
              "safetensors loader assumes little-endian");

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Shape = std::vector<std::uint64_t>;

/// One mapped .safetensors file with its parsed header.
struct Shard {
  std::unique_ptr<MappedFile> file;
  json header;                      // {name: {dtype, shape, data_offsets}, "__metadata__": ...}
  const std::byte* data = nullptr;  // start of the data region; offsets are relative to it
  std::uint64_t data_size = 0;
  [[nodiscard]] const std::string& path() const { return file->path(); }
};

Shard open_shard(const fs::path& path) {
  Shard s;
  s.file = std::make_unique<MappedFile>(path.string());
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
  return s;
}

/// Where each tensor lives: one file, or the shards named by an index's weight_map.
class TensorSource {
 public:
  explicit TensorSource(const std::string& dir) {
    const fs::path single = fs::path(dir) / "model.safetensors";
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    if (fs::exists(index)) {
      read_index(index);
    } else if (fs::exists(single)) {
      shards_.push_back(open_shard(single));
    } else {
      throw InputError(
          fmt::format("model folder '{}' has neither model.safetensors nor "
                      "model.safetensors.index.json",
                      dir));
    }
  }

  /// The shard and header entry of `name`, or {nullptr, nullptr} when absent.
  std::pair<const Shard*, const json*> find(const std::string& name) const {
    const Shard* shard = &shards_.front();
    if (!index_path_.empty()) {
      const auto it = shard_of_.find(name);
      if (it == shard_of_.end()) return {nullptr, nullptr};
      shard = &shards_[it->second];
    }
    const auto e = shard->header.find(name);
    return {shard, e == shard->header.end() ? nullptr : &*e};
  }

  /// Like find, but throws an error naming the tensor and where it was looked for.
  std::pair<const Shard*, const json*> require(const std::string& name) const {
    const auto [shard, entry] = find(name);
    if (entry != nullptr) return {shard, entry};
    if (shard == nullptr)
      throw InputError(fmt::format("missing tensor '{}': not listed in the weight_map of '{}'",
                                   name, index_path_));
    if (!index_path_.empty())
      throw InputError(
          fmt::format("missing tensor '{}': '{}' maps it to '{}', whose header does "
                      "not list it",
                      name, index_path_, shard->path()));
    throw InputError(fmt::format("missing tensor '{}' in '{}'", name, shard->path()));
  }

 private:
  void read_index(const fs::path& index) {
    index_path_ = index.string();
    std::ifstream in(index);
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
      throw InputError(fmt::format("'{}' is not valid JSON: {}", index_path_, e.what()));
    }
    const auto wm = j.is_object() ? j.find("weight_map") : j.end();
    if (!j.is_object() || wm == j.end() || !wm->is_object())
      throw InputError(fmt::format("'{}' has no \"weight_map\" object", index_path_));
    std::map<std::string, std::size_t> shard_ids;  // file name -> index into shards_
    for (const auto& [tensor, file] : wm->items()) {
      // Plain names only: an index must not send the loader to files outside the folder.
      const std::string f = file.is_string() ? file.get<std::string>() : std::string();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        throw InputError(
            fmt::format("'{}': weight_map entry for '{}' must be a file name in the "
                        "same folder, got {}",
                        index_path_, tensor, file.dump()));
      auto [it, inserted] = shard_ids.emplace(f, shards_.size());
      if (inserted) shards_.push_back(open_shard(index.parent_path() / f));
      shard_of_.emplace(tensor, it->second);
    }
    if (shards_.empty()) throw InputError(fmt::format("'{}' has an empty weight_map", index_path_));
  }

  std::vector<Shard> shards_;
  std::string index_path_;                       // empty for a single model.safetensors
  std::map<std::string, std::size_t> shard_of_;  // tensor name -> shard (indexed folders only)
};

// Reads a JSON array of non-negative integers; nullopt when it is anything else.
std::optional<Shape> uint_array(const json& j) {
  if (!j.is_array()) return std::nullopt;
  Shape out;
  for (const json& v : j) {
    if (!v.is_number_unsigned()) return std::nullopt;
    out.push_back(v.get<std::uint64_t>());
  }
  return out;
}

/// Validates one tensor's header entry against `shape` and widens it into a buffer owned by `w`.
const float* load_tensor(ModelWeights& w, const TensorSource& src, const std::string& name,
                         const Shape& shape) {
  const auto [shard, entry] = src.require(name);
  const std::string where = fmt::format("tensor '{}' in '{}'", name, shard->path());
  if (!entry->is_object()) throw InputError(where + " has a header entry that is not an object");

  const json dt = entry->value("dtype", json());
  const std::string dtype = dt.is_string() ? dt.get<std::string>() : dt.dump();
  std::size_t elem = 0;
  if (dtype == "F32") elem = 4;
  if (dtype == "F16" || dtype == "BF16") elem = 2;
  if (elem == 0)
    throw InputError(
        fmt::format("{} has dtype '{}'; kvheap loads F32, F16 and BF16", where, dtype));

  const auto found = uint_array(entry->value("shape", json()));
  if (!found) throw InputError(where + " has no \"shape\" list of non-negative integers");
  if (*found != shape)
    throw InputError(fmt::format("{} has shape [{}], expected [{}]", where, fmt::join(*found, ", "),
                                 fmt::join(shape, ", ")));

  const auto offsets = uint_array(entry->value("data_offsets", json()));
  if (!offsets || offsets->size() != 2)
    throw InputError(where + " has no \"data_offsets\" pair of non-negative integers");
  const std::uint64_t begin = (*offsets)[0], end = (*offsets)[1];
  if (begin > end || end > shard->data_size)
    throw InputError(fmt::format("{} has data_offsets [{}, {}] outside the {}-byte data region",
                                 where, begin, end, shard->data_size));
  // The shape matched config.json, which validate() bounded, so this product cannot overflow.
  std::uint64_t count = 1;
  for (std::uint64_t d : shape) count *= d;
  if (end - begin != count * elem)
    throw InputError(
        fmt::format("{} has data_offsets [{}, {}] spanning {} bytes, but shape [{}] "
                    "in {} needs {}",
                    where, begin, end, end - begin, fmt::join(shape, ", "), dtype, count * elem));

  float* out = w.allocate(count);
  const std::byte* in = shard->data + begin;  // not necessarily aligned: copy, never cast
  if (elem == 4) {
    std::memcpy(out, in, count * 4);
  } else {
    const bool half = dtype == "F16";
    for (std::uint64_t i = 0; i < count; ++i) {
      std::uint16_t bits;
      std::memcpy(&bits, in + 2 * i, 2);
      out[i] = half ? fp16_to_float(bits) : bf16_to_float(bits);
    }
  }
  return out;
}

}  // namespace

ModelWeights load_safetensors(const std::string& dir) {
  ModelWeights w;
  w.config = load_hf_config(dir);  // first: every shape below is checked against it
  const ModelConfig& c = w.config;
  const TensorSource src(dir);

  const std::uint64_t d = c.dim, hidden = c.hidden_dim, vocab = c.vocab_size;
  const std::uint64_t q = c.q_dim(), kv = c.kv_dim();
  auto load = [&](const std::string& name, const Shape& shape) {
    return load_tensor(w, src, name, shape);
  };

  w.token_embedding = load("model.embed_tokens.weight", {vocab, d});  // [vocab_size, dim]
  w.layers.resize(static_cast<std::size_t>(c.n_layers));
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    LayerWeights& L = w.layers[l];
    const std::string p = fmt::format("model.layers.{}.", l);
    L.attn_norm = load(p + "input_layernorm.weight", {d});  // [dim]
    L.wq = load(p + "self_attn.q_proj.weight", {q, d});     // [q_dim, dim]
    L.wk = load(p + "self_attn.k_proj.weight", {kv, d});    // [kv_dim, dim]
    L.wv = load(p + "self_attn.v_proj.weight", {kv, d});    // [kv_dim, dim]
    L.wo = load(p + "self_attn.o_proj.weight", {d, q});     // [dim, q_dim]
    if (c.attention_bias) {
      L.bq = load(p + "self_attn.q_proj.bias", {q});   // [q_dim]
      L.bk = load(p + "self_attn.k_proj.bias", {kv});  // [kv_dim]
      L.bv = load(p + "self_attn.v_proj.bias", {kv});  // [kv_dim]
    }
    // Llama's attention_bias also biases o_proj; there is no field for it, and dropping it would
    // be a silent wrong answer.
    if (src.find(p + "self_attn.o_proj.bias").second != nullptr)
      throw InputError(
          fmt::format("'{}' has tensor '{}self_attn.o_proj.bias'; kvheap supports "
                      "biases on q/k/v only (Qwen2 style)",
                      dir, p));
    L.ffn_norm = load(p + "post_attention_layernorm.weight", {d});  // [dim]
    L.w1 = load(p + "mlp.gate_proj.weight", {hidden, d});           // [hidden_dim, dim]
    L.w2 = load(p + "mlp.down_proj.weight", {d, hidden});           // [dim, hidden_dim]
    L.w3 = load(p + "mlp.up_proj.weight", {hidden, d});             // [hidden_dim, dim]
  }
  w.final_norm = load("model.norm.weight", {d});  // [dim]
  // Tied checkpoints usually omit lm_head.weight; when one is present anyway it is ignored, since
  // config.json is what says the two are shared.
  w.classifier = c.tied_embeddings ? w.token_embedding : load("lm_head.weight", {vocab, d});
  return w;
}

}  // namespace kvheap
