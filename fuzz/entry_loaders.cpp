// Fuzz entry points for the two checkpoint loaders: llama2.c .bin files and Hugging Face
// safetensors folders. Both loaders take a path, so inputs go through scratch files.
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "common/model/gguf_file.hpp"
#include "common/model/gguf_loader.hpp"
#include "common/tokenizer/gguf_tokenizer.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/model/safetensors_loader.hpp"
#include "fuzz/entry_points.hpp"
#include "fuzz/fuzz_support.hpp"

namespace kvheap {

namespace {

using fuzz::require;

// A tiny valid Llama config (1 layer, 2 query heads over 1 KV head, head_dim 4, vocab 8) that
// fuzz_safetensors pairs with inputs that carry only the .safetensors part, so that mutations
// spend their time in the binary header and tensor checks. fuzz/make_seeds.py writes the same.
constexpr std::string_view kFixedConfig = R"({
  "model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
  "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 8,
  "max_position_embeddings": 16, "tie_word_embeddings": true
})";

struct Extent {
  std::uintptr_t begin;  // address of the first float
  std::size_t floats;
};

// The oracle for a loaded llama2.c checkpoint: the tensors, recomputed from the config alone, must
// not overlap and must tile the file after the header exactly, leaving one gap only for the
// version 0 RoPE tables. The loader's own end-of-walk check compares against its own arithmetic;
// this compares against the shapes.
void check_tiling(const ModelWeights& w, std::size_t file_size, bool versioned) {
  const ModelConfig& c = w.config;
  const std::size_t d = c.dim, hid = c.hidden_dim, vocab = c.vocab_size;
  const std::size_t q = c.q_dim(), kv = c.kv_dim();
  std::vector<Extent> ext;
  auto add = [&](const float* p, std::size_t n, const char* what) {
    require(p != nullptr, std::string("llama2.c tensor left null: ") + what);
    ext.push_back({reinterpret_cast<std::uintptr_t>(p), n});
  };
  add(w.token_embedding, vocab * d, "token_embedding");
  add(w.final_norm, d, "final_norm");
  if (c.tied_embeddings) {
    require(w.classifier == w.token_embedding, "a shared classifier must alias the embedding");
  } else {
    add(w.classifier, vocab * d, "classifier");
  }
  require(w.layers.size() == static_cast<std::size_t>(c.n_layers), "one LayerWeights per layer");
  for (const LayerWeights& L : w.layers) {
    add(L.attn_norm, d, "attn_norm");
    add(L.ffn_norm, d, "ffn_norm");
    add(L.wq, q * d, "wq");
    add(L.wk, kv * d, "wk");
    add(L.wv, kv * d, "wv");
    add(L.wo, d * q, "wo");
    add(L.w1, hid * d, "w1");
    add(L.w2, d * hid, "w2");
    add(L.w3, hid * d, "w3");
  }
  std::sort(ext.begin(), ext.end(),
            [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
  // Version 0 stores two RoPE tables of [max_seq_len, head_dim/2] floats after the final norm:
  // a gap before an untied classifier, or the file's tail when the classifier is shared.
  const std::size_t rope = versioned ? 0 : static_cast<std::size_t>(c.max_seq_len) * c.head_dim;
  std::size_t floats = ext.front().floats;
  bool gap_seen = false;
  for (std::size_t i = 1; i < ext.size(); ++i) {
    const std::uintptr_t end = ext[i - 1].begin + ext[i - 1].floats * sizeof(float);
    require(ext[i].begin >= end, "llama2.c tensors overlap");
    if (ext[i].begin != end) {
      require(!gap_seen && ext[i].begin - end == rope * sizeof(float),
              "llama2.c tensors leave a gap that is not the version 0 RoPE tables");
      gap_seen = true;
    }
    floats += ext[i].floats;
  }
  const std::size_t header = versioned ? kLlama2cV1HeaderBytes : kLlama2cV0HeaderBytes;
  require(header + (floats + rope) * sizeof(float) == file_size,
          "llama2.c tensors do not cover the file exactly");
}

}  // namespace

FuzzOutcome fuzz_llama2c_loader(std::span<const std::uint8_t> input, std::string* why) {
  const std::string path = fuzz::write_scratch("model.bin", fuzz::as_text(input));
  ModelWeights w;
  try {
    w = load_llama2c(path);
  } catch (const Error& e) {
    return fuzz::rejected(e, why);
  }
  std::uint32_t magic = 0;
  if (input.size() >= 4) std::memcpy(&magic, input.data(), 4);
  check_tiling(w, input.size(), magic == kLlama2cMagic);
  return FuzzOutcome::Accepted;
}

FuzzOutcome fuzz_safetensors(std::span<const std::uint8_t> input, std::string* why) {
  const std::vector<std::string_view> parts = fuzz::split_parts(fuzz::as_text(input));
  const bool has_config = parts.size() >= 2;
  const std::string dir = (fuzz::scratch_dir() / "hf-model").string();
  std::filesystem::create_directories(dir);
  fuzz::write_scratch("hf-model/config.json", has_config ? parts[0] : kFixedConfig);
  fuzz::write_scratch("hf-model/model.safetensors", has_config ? parts[1] : parts[0]);
  // An index, when present, takes precedence; its weight_map may only name files in the folder,
  // so the three written here are all it can reach.
  if (parts.size() >= 3) {
    fuzz::write_scratch("hf-model/model.safetensors.index.json", parts[2]);
  } else {
    fuzz::remove_scratch("hf-model/model.safetensors.index.json");
  }
  ModelWeights w;
  try {
    w = load_safetensors(dir);
  } catch (const Error& e) {
    return fuzz::rejected(e, why);
  }
  // Accepted: the config must be one validate() passes, and every tensor must be there.
  w.config.validate();
  require(w.token_embedding != nullptr && w.final_norm != nullptr && w.classifier != nullptr,
          "safetensors load left a tensor null");
  require(w.layers.size() == static_cast<std::size_t>(w.config.n_layers),
          "one LayerWeights per layer");
  for (const LayerWeights& L : w.layers)
    require(L.wq && L.wk && L.wv && L.wo && L.w1 && L.w2 && L.w3 && L.attn_norm && L.ffn_norm &&
                (!w.config.attention_bias || (L.bq && L.bk && L.bv)) &&
                (!w.config.qk_norm || (L.q_norm && L.k_norm)),
            "safetensors load left a layer tensor null");
  return FuzzOutcome::Accepted;
}

FuzzOutcome fuzz_gguf(std::span<const std::uint8_t> input, std::string* why) {
  const std::span<const std::byte> bytes = std::as_bytes(input);
  try {
    const GgufFile f(bytes, "fuzz.gguf");
    for (const GgufTensor& t : f.tensors())
      require(t.data >= bytes.data() &&
                  t.bytes <= static_cast<std::uint64_t>(bytes.data() + bytes.size() - t.data),
              "a GGUF tensor's data lies outside the file");
    if (f.find("tokenizer.ggml.model") != nullptr) {
      const BpeTokenizer tok(gguf_tokenizer_parts(f));
      const std::vector<int> ids = tok.encode("Hello, world 123 \xE4\xBD\xA0 <|im_start|>x", true);
      for (const int id : ids)
        require(id >= 0 && id < tok.vocab_size(), "a GGUF tokenizer produced an id out of range");
      (void)tok.decode(ids);
    }
    if (f.find("general.architecture") != nullptr) {
      const ModelWeights w = load_gguf(fuzz::write_scratch("model.gguf", fuzz::as_text(input)));
      w.config.validate();
      require(w.token_embedding != nullptr && w.final_norm != nullptr && w.classifier != nullptr &&
                  w.layers.size() == static_cast<std::size_t>(w.config.n_layers),
              "a GGUF load left a tensor null");
      for (const LayerWeights& L : w.layers)
        require(L.wq && L.wk && L.wv && L.wo && L.w1 && L.w2 && L.w3 && L.attn_norm && L.ffn_norm,
                "a GGUF load left a layer tensor null");
    }
  } catch (const Error& e) {
    return fuzz::rejected(e, why);
  }
  return FuzzOutcome::Accepted;
}

}  // namespace kvheap
