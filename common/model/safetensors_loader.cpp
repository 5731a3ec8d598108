// Hugging Face safetensors loader: shard discovery, tensor lookup and fp32 conversion.
//
// Checks come in three passes. When a file is opened, its header must describe a well-formed
// safetensors file: every tensor's byte range inside the data region, and the ranges tiling it
// exactly (common/model/safetensors_file.cpp). When a tensor is looked up, its dtype and shape must
// match what config.json implies. At the end, every tensor must have been looked up (apart from a
// short allow-list of tensors real checkpoints carry and kvheap recomputes), so weights that
// disagree with config.json, such as an extra layer, are an error rather than silently dropped.
#include "common/model/safetensors_loader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "base/error.hpp"
#include "base/half.hpp"
#include "common/util/file_checks.hpp"
#include "common/model/hf_config.hpp"
#include "common/model/safetensors_file.hpp"

namespace kvheap {

static_assert(std::endian::native == std::endian::little, "safetensors tensors are little-endian");

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Shape = std::vector<std::uint64_t>;

// An index lists one line per tensor: a few hundred kilobytes for the largest models.
constexpr std::uint64_t kMaxIndexBytes = 100'000'000;

/// Where each tensor lives: one file, or the shards named by an index's weight_map.
class TensorSource {
 public:
  explicit TensorSource(const std::string& dir) {
    const fs::path single = fs::path(dir) / "model.safetensors";
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    std::error_code ec;  // unreadable counts as absent; opening the file then names the reason
    if (fs::exists(index, ec)) {
      read_index(index);
    } else if (fs::exists(single, ec)) {
      shards_.push_back(open_safetensors(single.string()));
    } else {
      throw InputError(
          fmt::format("model folder '{}' has neither model.safetensors nor "
                      "model.safetensors.index.json",
                      dir));
    }
  }

  /// The shard and header entry of `name`, or {nullptr, nullptr} when absent.
  std::pair<const SafetensorsFile*, const json*> find(const std::string& name) const {
    const SafetensorsFile* shard = &shards_.front();
    if (!index_path_.empty()) {
      const auto it = shard_of_.find(name);
      if (it == shard_of_.end()) return {nullptr, nullptr};
      shard = &shards_[it->second];
    }
    const auto e = shard->header.find(name);
    return {shard, e == shard->header.end() ? nullptr : &*e};
  }

  /// Like find, but throws an error naming the tensor, the shape it should have (`shape`, with
  /// `note` after it when not empty) and where it was looked for, and records the tensor as used.
  std::pair<const SafetensorsFile*, const json*> require(const std::string& name,
                                                         const Shape& shape,
                                                         const std::string& note) {
    const auto [shard, entry] = find(name);
    if (entry != nullptr) {
      used_.emplace(shard, name);
      return {shard, entry};
    }
    const std::string missing =
        fmt::format("missing tensor '{}' (expected shape [{}]{})", name, fmt::join(shape, ", "),
                    note.empty() ? "" : "; " + note);
    if (shard == nullptr)
      throw InputError(
          fmt::format("{}: not listed in the weight_map of '{}'", missing, index_path_));
    if (!index_path_.empty())
      throw InputError(fmt::format("{}: '{}' maps it to '{}', whose header does not list it",
                                   missing, index_path_, shard->path()));
    throw InputError(fmt::format("{} in '{}'", missing, shard->path()));
  }

  /// Names of the tensors in every file's header that require() never returned, sorted.
  [[nodiscard]] std::vector<std::string> unused() const {
    std::vector<std::string> names;
    for (const SafetensorsFile& shard : shards_)
      for (const auto& [name, entry] : shard.header.items())
        if (name != kSafetensorsMetadataKey && used_.count({&shard, name}) == 0)
          names.push_back(name);
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  void read_index(const fs::path& index) {
    index_path_ = index.string();
    const std::string text = read_regular_file(
        index_path_, "shard index",
        "a model.safetensors.index.json (a JSON object with a weight_map)", kMaxIndexBytes);
    json j;
    try {
      j = json::parse(text);
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
      if (inserted) shards_.push_back(open_safetensors((index.parent_path() / f).string()));
      shard_of_.emplace(tensor, it->second);
    }
    if (shards_.empty()) throw InputError(fmt::format("'{}' has an empty weight_map", index_path_));
  }

  std::vector<SafetensorsFile> shards_;
  std::string index_path_;                       // empty for a single model.safetensors
  std::map<std::string, std::size_t> shard_of_;  // tensor name -> shard (indexed folders only)
  std::set<std::pair<const SafetensorsFile*, std::string>> used_;  // tensors require() has returned
};

/// Validates one tensor's header entry against `shape` and widens it into a buffer owned by `w`.
/// `note`, when not empty, says why the tensor has that shape in the errors about it.
const float* load_tensor(ModelWeights& w, TensorSource& src, const std::string& name,
                         const Shape& shape, const std::string& note = "") {
  const auto [shard, entry] = src.require(name, shape, note);
  const std::string where = fmt::format("tensor '{}' in '{}'", name, shard->path());
  // Already checked against the data region when the file was opened.
  const TensorExtent range = tensor_extent(*shard, name, *entry);
  const std::uint64_t begin = range.begin, end = range.end;

  const json dt = entry->value("dtype", json());
  const std::string dtype = dt.is_string() ? dt.get<std::string>() : dt.dump();
  std::size_t elem = 0;
  if (dtype == "F32") elem = 4;
  if (dtype == "F16" || dtype == "BF16") elem = 2;
  if (elem == 0)
    throw InputError(
        fmt::format("{} has dtype '{}'; kvheap loads F32, F16 and BF16", where, dtype));

  const auto found = json_uint_array(entry->value("shape", json()));
  if (!found) throw InputError(where + " has no \"shape\" list of non-negative integers");
  if (*found != shape)
    throw InputError(fmt::format("{} has shape [{}], expected [{}]{}", where,
                                 fmt::join(*found, ", "), fmt::join(shape, ", "),
                                 note.empty() ? "" : " (" + note + ")"));

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

/// Tensors real Llama checkpoints carry that the model does not read. Anything else left unused
/// means config.json and the weights disagree (an extra layer, another architecture's tensors)
/// and is rejected rather than silently dropped.
std::set<std::string> ignorable_tensors(const ModelConfig& c) {
  // Older transformers versions saved RoPE's inverse frequencies as a buffer; kvheap computes
  // them from rope_theta and rope_scaling instead.
  std::set<std::string> names = {"model.rotary_emb.inv_freq"};
  for (int l = 0; l < c.n_layers; ++l)
    names.insert(fmt::format("model.layers.{}.self_attn.rotary_emb.inv_freq", l));
  // Some tied exports store the shared matrix twice; config.json decides, as in transformers.
  if (c.tied_embeddings) names.insert("lm_head.weight");
  return names;
}

void reject_unused_tensors(const TensorSource& src, const ModelConfig& c, const std::string& dir) {
  const std::set<std::string> ignorable = ignorable_tensors(c);
  std::vector<std::string> unused = src.unused();
  std::erase_if(unused, [&](const std::string& n) { return ignorable.count(n) != 0; });
  if (unused.empty()) return;
  constexpr std::size_t kShown = 5;
  const std::size_t shown = std::min(unused.size(), kShown);
  const std::string more =
      unused.size() > shown ? fmt::format(" and {} more", unused.size() - shown) : "";
  throw InputError(fmt::format(
      "model folder '{}' holds {} {} the model does not use: '{}'{}; expected only the "
      "tensors of the {}-layer model config.json describes (config.json and the weights "
      "disagree, or the checkpoint is not a plain Llama-family model)",
      dir, unused.size(), unused.size() == 1 ? "tensor" : "tensors",
      fmt::join(unused.begin(), unused.begin() + shown, "', '"), more, c.n_layers));
}

}  // namespace

ModelWeights load_safetensors(const std::string& dir) {
  ModelWeights w;
  w.config = load_hf_config(dir);  // first: every shape below is checked against it
  const ModelConfig& c = w.config;
  TensorSource src(dir);

  const std::uint64_t d = c.dim, hidden = c.hidden_dim, vocab = c.vocab_size;
  const std::uint64_t q = c.q_dim(), kv = c.kv_dim(), head = c.head_dim;
  auto load = [&](const std::string& name, const Shape& shape, const std::string& note = "") {
    return load_tensor(w, src, name, shape, note);
  };
  const std::string qk_note = fmt::format(
      "model_type qwen3 normalises every head of q and k with one gain per dimension, head_dim = "
      "{} values",
      c.head_dim);

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
    if (c.qk_norm) {
      L.q_norm = load(p + "self_attn.q_norm.weight", {head}, qk_note);  // [head_dim]
      L.k_norm = load(p + "self_attn.k_norm.weight", {head}, qk_note);  // [head_dim]
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
  reject_unused_tensors(src, c, dir);
  return w;
}

}  // namespace kvheap
