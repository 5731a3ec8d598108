#include "tests/support/gguf_writer.hpp"

#include <cstring>
#include <vector>

namespace kvheap::test {

std::string gguf_string(const std::string& s) { return le_bytes<std::uint64_t>(s.size()) + s; }

namespace {
std::string key_header(const std::string& key, std::uint32_t type) {
  return gguf_string(key) + le_bytes(type);
}
}  // namespace

void GgufWriter::u32(const std::string& key, std::uint32_t v) {
  kv_.push_back(key_header(key, 4) + le_bytes(v));
}
void GgufWriter::f32(const std::string& key, float v) {
  kv_.push_back(key_header(key, 6) + le_bytes(v));
}
void GgufWriter::boolean(const std::string& key, bool v) {
  kv_.push_back(key_header(key, 7) + le_bytes<std::uint8_t>(v ? 1 : 0));
}
void GgufWriter::string(const std::string& key, const std::string& v) {
  kv_.push_back(key_header(key, 8) + gguf_string(v));
}
void GgufWriter::strings(const std::string& key, const std::vector<std::string>& v) {
  std::string s =
      key_header(key, 9) + le_bytes<std::uint32_t>(8) + le_bytes<std::uint64_t>(v.size());
  for (const std::string& e : v) s += gguf_string(e);
  kv_.push_back(std::move(s));
}
void GgufWriter::i32s(const std::string& key, const std::vector<std::int32_t>& v) {
  std::string s =
      key_header(key, 9) + le_bytes<std::uint32_t>(5) + le_bytes<std::uint64_t>(v.size());
  for (const std::int32_t e : v) s += le_bytes(e);
  kv_.push_back(std::move(s));
}
void GgufWriter::f32s(const std::string& key, const std::vector<float>& v) {
  std::string s =
      key_header(key, 9) + le_bytes<std::uint32_t>(6) + le_bytes<std::uint64_t>(v.size());
  for (const float e : v) s += le_bytes(e);
  kv_.push_back(std::move(s));
}
void GgufWriter::raw(const std::string& key, std::uint32_t type, const std::string& value) {
  kv_.push_back(key_header(key, type) + value);
}
void GgufWriter::tensor(const std::string& name, std::vector<std::uint64_t> dims,
                        std::uint32_t type, std::string data) {
  tensors_.push_back({name, std::move(dims), type, std::move(data)});
}

void GgufWriter::drop_tensor(const std::string& name) {
  std::erase_if(tensors_, [&](const Tensor& t) { return t.name == name; });
}

std::string GgufWriter::bytes(std::uint32_t version, std::uint64_t alignment) const {
  std::string out = "GGUF" + le_bytes(version) + le_bytes<std::uint64_t>(tensors_.size()) +
                    le_bytes<std::uint64_t>(kv_.size());
  for (const std::string& kv : kv_) out += kv;
  std::string data;
  for (const Tensor& t : tensors_) {
    while (data.size() % alignment != 0) data += '\0';
    out += gguf_string(t.name) + le_bytes<std::uint32_t>(t.dims.size());
    for (const std::uint64_t d : t.dims) out += le_bytes(d);
    out += le_bytes(t.type) + le_bytes<std::uint64_t>(data.size());
    data += t.data;
  }
  while (out.size() % alignment != 0) out += '\0';
  return out + data;
}

GgufWriter tiny_model_gguf(const std::string& arch) {
  GgufWriter w;
  w.string("general.architecture", arch);
  w.string("general.name", "tiny");
  w.u32(arch + ".block_count", 1);
  w.u32(arch + ".context_length", 16);
  w.u32(arch + ".embedding_length", 8);
  w.u32(arch + ".feed_forward_length", 16);
  w.u32(arch + ".attention.head_count", 2);
  w.u32(arch + ".attention.head_count_kv", 1);
  w.f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.f32(arch + ".rope.freq_base", 10000.0f);
  w.string("tokenizer.ggml.model", "gpt2");
  w.string("tokenizer.ggml.pre", "default");
  w.strings("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e", "f", "g", "h"});
  w.i32s("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 1, 1});
  w.strings("tokenizer.ggml.merges", {});
  w.u32("tokenizer.ggml.bos_token_id", 0);
  w.u32("tokenizer.ggml.eos_token_id", 1);
  const auto f32_tensor = [&](const std::string& name, std::vector<std::uint64_t> dims) {
    std::uint64_t n = 1;
    for (const std::uint64_t d : dims) n *= d;
    std::string data;
    for (std::uint64_t i = 0; i < n; ++i)
      data += le_bytes(static_cast<float>(static_cast<int>(i * 7 % 13) - 6) / 16.0f);
    w.tensor(name, std::move(dims), 0, std::move(data));
  };
  f32_tensor("token_embd.weight", {8, 8});
  f32_tensor("output_norm.weight", {8});
  f32_tensor("blk.0.attn_norm.weight", {8});
  f32_tensor("blk.0.attn_q.weight", {8, 8});
  f32_tensor("blk.0.attn_k.weight", {8, 4});
  f32_tensor("blk.0.attn_v.weight", {8, 4});
  f32_tensor("blk.0.attn_output.weight", {8, 8});
  f32_tensor("blk.0.ffn_norm.weight", {8});
  f32_tensor("blk.0.ffn_gate.weight", {8, 16});
  f32_tensor("blk.0.ffn_down.weight", {16, 8});
  f32_tensor("blk.0.ffn_up.weight", {8, 16});
  if (arch == "qwen2") {
    f32_tensor("blk.0.attn_q.bias", {8});
    f32_tensor("blk.0.attn_k.bias", {4});
    f32_tensor("blk.0.attn_v.bias", {4});
  }
  if (arch == "qwen3") {
    f32_tensor("blk.0.attn_q_norm.weight", {4});
    f32_tensor("blk.0.attn_k_norm.weight", {4});
  }
  return w;
}

}  // namespace kvheap::test
