// Test-only writers for llama2.c and safetensors checkpoints, and file helpers for malformed ones.
#include "tests/support/checkpoint_writers.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "base/half.hpp"
#include "common/model/llama2c_loader.hpp"

namespace kvheap::test {

namespace {

using nlohmann::json;

void put_i32(std::string& out, std::int32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

void put_f32(std::string& out, const float* p, std::size_t n) {
  out.append(reinterpret_cast<const char*>(p), n * sizeof(float));
}

// Appends one tensor in `dtype`, little-endian, as safetensors stores it.
void put_as(std::string& out, const float* p, std::size_t n, DType dtype) {
  if (dtype == DType::F32) return put_f32(out, p, n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t bits = dtype == DType::F16 ? float_to_fp16(p[i]) : float_to_bf16(p[i]);
    out.append(reinterpret_cast<const char*>(&bits), 2);
  }
}

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
  }
  return "?";
}

void write_safetensors_file(const std::string& path, const std::vector<NamedTensor>& tensors,
                            DType dtype) {
  json header = json::object();
  std::string data;
  for (const NamedTensor& t : tensors) {
    const std::uint64_t begin = data.size();
    put_as(data, t.data, t.numel(), dtype);
    header[t.name] = {{"dtype", safetensors_dtype(dtype)},
                      {"shape", t.shape},
                      {"data_offsets", json::array({begin, std::uint64_t{data.size()}})}};
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string text = header.dump();
  // Real writers pad the header with spaces so the data region starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t n = text.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  write_bytes(path, out + text + data);
}

}  // namespace

std::size_t NamedTensor::numel() const {
  std::size_t n = 1;
  for (std::uint64_t d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

ModelConfig tiny_qwen3_config() {
  ModelConfig c = preset("tiny");
  c.name = "tiny-qwen3";
  c.qk_norm = true;
  c.head_dim = 32;
  c.rope_style = RopeStyle::Halves;
  c.rope_theta = 1000000.0f;
  c.norm_eps = 1e-6f;
  c.stop_ids = {2};
  return c;
}

ModelWeights random_weights(const ModelConfig& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  ModelWeights w;
  w.config = c;
  // 24 random bits scaled into [-0.5, 0.5): exactly representable in fp32, so no rounding hides
  // in the "expected" side of a comparison.
  auto fill = [&](std::size_t n) {
    float* p = w.allocate(n);
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<float>(rng() >> 40) * 0x1p-24f - 0.5f;
    return p;
  };
  const std::size_t d = c.dim, hid = c.hidden_dim, vocab = c.vocab_size;
  const std::size_t q = c.q_dim(), kv = c.kv_dim();
  w.token_embedding = fill(vocab * d);
  w.layers.resize(c.n_layers);
  for (LayerWeights& L : w.layers) {
    L.attn_norm = fill(d);
    L.wq = fill(q * d);
    L.wk = fill(kv * d);
    L.wv = fill(kv * d);
    L.wo = fill(d * q);
    if (c.attention_bias) {
      L.bq = fill(q);
      L.bk = fill(kv);
      L.bv = fill(kv);
    }
    if (c.qk_norm) {
      L.q_norm = fill(c.head_dim);
      L.k_norm = fill(c.head_dim);
    }
    L.ffn_norm = fill(d);
    L.w1 = fill(hid * d);
    L.w2 = fill(d * hid);
    L.w3 = fill(hid * d);
  }
  w.final_norm = fill(d);
  w.classifier = c.tied_embeddings ? w.token_embedding : fill(vocab * d);
  return w;
}

std::vector<NamedTensor> hf_tensors(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  const std::uint64_t d = c.dim, hid = c.hidden_dim, vocab = c.vocab_size;
  const std::uint64_t q = c.q_dim(), kv = c.kv_dim(), head = c.head_dim;
  std::vector<NamedTensor> t;
  t.push_back({"model.embed_tokens.weight", {vocab, d}, w.token_embedding});
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string p = fmt::format("model.layers.{}.", l);
    t.push_back({p + "input_layernorm.weight", {d}, L.attn_norm});
    t.push_back({p + "self_attn.q_proj.weight", {q, d}, L.wq});
    t.push_back({p + "self_attn.k_proj.weight", {kv, d}, L.wk});
    t.push_back({p + "self_attn.v_proj.weight", {kv, d}, L.wv});
    t.push_back({p + "self_attn.o_proj.weight", {d, q}, L.wo});
    if (c.attention_bias) {
      t.push_back({p + "self_attn.q_proj.bias", {q}, L.bq});
      t.push_back({p + "self_attn.k_proj.bias", {kv}, L.bk});
      t.push_back({p + "self_attn.v_proj.bias", {kv}, L.bv});
    }
    if (c.qk_norm) {
      t.push_back({p + "self_attn.q_norm.weight", {head}, L.q_norm});
      t.push_back({p + "self_attn.k_norm.weight", {head}, L.k_norm});
    }
    t.push_back({p + "post_attention_layernorm.weight", {d}, L.ffn_norm});
    t.push_back({p + "mlp.gate_proj.weight", {hid, d}, L.w1});
    t.push_back({p + "mlp.down_proj.weight", {d, hid}, L.w2});
    t.push_back({p + "mlp.up_proj.weight", {hid, d}, L.w3});
  }
  t.push_back({"model.norm.weight", {d}, w.final_norm});
  if (!c.tied_embeddings) t.push_back({"lm_head.weight", {vocab, d}, w.classifier});
  return t;
}

void write_llama2c(const ModelWeights& w, const std::string& path, int version) {
  const ModelConfig& c = w.config;
  if (c.qk_norm || c.attention_bias)
    throw std::invalid_argument("test helper: llama2.c checkpoints have no q/k norms or biases");
  const std::size_t d = c.dim, hid = c.hidden_dim, vocab = c.vocab_size;
  const std::size_t q = c.q_dim(), kv = c.kv_dim();
  std::string out;
  if (version == 1) {
    out.append(reinterpret_cast<const char*>(&kLlama2cMagic), 4);
    put_i32(out, 1);
  }
  for (int v : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads}) put_i32(out, v);
  // Version 0 has no flag byte: a negative vocab_size is how it says "classifier stored apart".
  put_i32(out, version == 0 && !c.tied_embeddings ? -c.vocab_size : c.vocab_size);
  put_i32(out, c.max_seq_len);
  if (version == 1) {
    out.push_back(c.tied_embeddings ? 1 : 0);
    out.resize(kLlama2cV1HeaderBytes, '\0');
  }
  auto each_layer = [&](const float* LayerWeights::*field, std::size_t n) {
    for (const LayerWeights& L : w.layers) put_f32(out, L.*field, n);
  };
  if (version == 0) {
    put_f32(out, w.token_embedding, vocab * d);
    each_layer(&LayerWeights::attn_norm, d);
    each_layer(&LayerWeights::wq, q * d);
    each_layer(&LayerWeights::wk, kv * d);
    each_layer(&LayerWeights::wv, kv * d);
    each_layer(&LayerWeights::wo, d * q);
    each_layer(&LayerWeights::ffn_norm, d);
    each_layer(&LayerWeights::w1, hid * d);
    each_layer(&LayerWeights::w2, d * hid);
    each_layer(&LayerWeights::w3, hid * d);
    put_f32(out, w.final_norm, d);
    // The two legacy RoPE tables; the loader skips them, so zeros do.
    out.append(2 * sizeof(float) * c.max_seq_len * (c.head_dim / 2), '\0');
  } else {
    each_layer(&LayerWeights::attn_norm, d);
    each_layer(&LayerWeights::ffn_norm, d);
    put_f32(out, w.final_norm, d);
    put_f32(out, w.token_embedding, vocab * d);
    each_layer(&LayerWeights::wq, q * d);
    each_layer(&LayerWeights::wk, kv * d);
    each_layer(&LayerWeights::wv, kv * d);
    each_layer(&LayerWeights::wo, d * q);
    each_layer(&LayerWeights::w1, hid * d);
    each_layer(&LayerWeights::w2, d * hid);
    each_layer(&LayerWeights::w3, hid * d);
  }
  if (!c.tied_embeddings) put_f32(out, w.classifier, vocab * d);
  write_bytes(path, out);
}

json hf_config_json(const ModelConfig& c) {
  const char* type = c.qk_norm ? "qwen3" : c.attention_bias ? "qwen2" : "llama";
  json j = {{"model_type", type},
            {"hidden_act", "silu"},
            {"hidden_size", c.dim},
            {"intermediate_size", c.hidden_dim},
            {"num_hidden_layers", c.n_layers},
            {"num_attention_heads", c.n_heads},
            {"num_key_value_heads", c.n_kv_heads},
            {"head_dim", c.head_dim},
            {"vocab_size", c.vocab_size},
            {"max_position_embeddings", c.max_seq_len},
            {"rope_theta", c.rope_theta},
            {"rms_norm_eps", c.norm_eps},
            {"tie_word_embeddings", c.tied_embeddings},
            {"bos_token_id", c.bos_id},
            {"rope_scaling", nullptr}};
  j["eos_token_id"] = c.stop_ids.size() == 1 ? json(c.stop_ids[0]) : json(c.stop_ids);
  // Qwen3 defaults attention_bias to false like Llama, so a biased Qwen3 config must say so.
  if (c.qk_norm && c.attention_bias) j["attention_bias"] = true;
  if (c.rope_scaling.enabled)
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_scaling.factor},
        {"low_freq_factor", c.rope_scaling.low_freq_factor},
        {"high_freq_factor", c.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  return j;
}

void write_safetensors(const ModelWeights& w, const std::string& dir, DType dtype, int shards) {
  std::filesystem::create_directories(dir);
  write_bytes(dir + "/config.json", hf_config_json(w.config).dump(2));
  const std::vector<NamedTensor> all = hf_tensors(w);
  if (shards <= 1) return write_safetensors_file(dir + "/model.safetensors", all, dtype);

  // Contiguous runs of tensors per shard, like Hugging Face's size-based splitting.
  json weight_map = json::object();
  const std::size_t per = (all.size() + shards - 1) / shards;
  for (int s = 0; s < shards; ++s) {
    const std::string name = fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, shards);
    const std::size_t lo = std::min(all.size(), s * per), hi = std::min(all.size(), lo + per);
    const std::vector<NamedTensor> part(all.begin() + lo, all.begin() + hi);
    for (const NamedTensor& t : part) weight_map[t.name] = name;
    std::string shard_path = dir;
    shard_path += '/';
    shard_path += name;
    write_safetensors_file(shard_path, part, dtype);
  }
  const json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  write_bytes(dir + "/model.safetensors.index.json", index.dump(2));
}

float stored_as(float x, DType dtype) {
  switch (dtype) {
    case DType::F32: return x;
    case DType::F16: return fp16_to_float(float_to_fp16(x));
    case DType::BF16: return bf16_to_float(float_to_bf16(x));
  }
  return x;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("test helper could not write '" + path + "'");
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("test helper could not read '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void edit_json_file(const std::string& path, const std::function<void(json&)>& edit) {
  json j = json::parse(read_bytes(path));
  edit(j);
  write_bytes(path, j.dump(2));
}

void edit_safetensors_header(const std::string& path, const std::function<void(json&)>& edit) {
  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  json header = json::parse(bytes.substr(8, n));
  edit(header);
  const std::string text = header.dump();
  const std::uint64_t m = text.size();
  write_bytes(path, std::string(reinterpret_cast<const char*>(&m), 8) + text + bytes.substr(8 + n));
}

void expect_same_tensors(const ModelWeights& got, const ModelWeights& want, DType stored) {
  const std::vector<NamedTensor> g = hf_tensors(got), w = hf_tensors(want);
  ASSERT_EQ(g.size(), w.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(g[i].name, w[i].name);
    ASSERT_EQ(g[i].shape, w[i].shape) << g[i].name;
    ASSERT_NE(g[i].data, nullptr) << g[i].name;
    std::size_t mismatches = 0, first = 0;
    for (std::size_t j = 0; j < w[i].numel(); ++j) {
      // Bit patterns, not ==, so -0.0 vs 0.0 or a changed NaN would show up too.
      if (std::bit_cast<std::uint32_t>(g[i].data[j]) !=
              std::bit_cast<std::uint32_t>(stored_as(w[i].data[j], stored)) &&
          mismatches++ == 0)
        first = j;
    }
    EXPECT_EQ(mismatches, 0u) << g[i].name << ": first mismatch at element " << first << ", got "
                              << g[i].data[first] << ", want "
                              << stored_as(w[i].data[first], stored);
  }
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = info != nullptr ? fmt::format("{}.{}", info->test_suite_name(), info->name())
                                     : std::string("no-test");
  std::replace(test.begin(), test.end(), '/', '_');  // parameterized tests are named "A/B.C/0"
  path_ = std::filesystem::temp_directory_path() /
          fmt::format("kvheap-{}-{}-{}", ::getpid(), test, counter++);
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;  // a cleanup failure must not turn into an exception during unwinding
  std::filesystem::remove_all(path_, ec);
}

}  // namespace kvheap::test
