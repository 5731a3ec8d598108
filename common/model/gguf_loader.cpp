#include "common/model/gguf_loader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <vector>

#include "base/error.hpp"

namespace kvheap {

namespace {

constexpr std::array<const char*, 3> kArchitectures = {"llama", "qwen2", "qwen3"};
constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

/// One tensor to widen: where it is and where it goes.
struct Job {
  const GgufTensor* tensor = nullptr;
  float* out = nullptr;
};

/// Finds the tensors of one model and checks each against the shape the config gives it.
class Tensors {
 public:
  explicit Tensors(const GgufFile& f) : file_(f) {}

  /// The tensor `name` of shape `dims` (fastest first), queued to be widened into `w`; null when
  /// it is missing and `optional`.
  const float* take(ModelWeights& w, const std::string& name, std::vector<std::uint64_t> dims,
                    const std::string& why, bool optional = false) {
    const GgufTensor* t = file_.tensor(name);
    if (t == nullptr) {
      if (optional) return nullptr;
      throw InputError(fmt::format("GGUF file '{}' has no tensor '{}' (shape [{}]: {})",
                                   file_.source(), name, fmt::join(dims, ", "), why));
    }
    if (t->dims != dims)
      throw InputError(
          fmt::format("GGUF file '{}': tensor '{}' has shape [{}], but the config "
                      "needs [{}] ({})",
                      file_.source(), name, fmt::join(t->dims, ", "), fmt::join(dims, ", "), why));
    used_.insert(name);
    float* out = w.allocate(t->elements());
    jobs_.push_back({t, out});
    return out;
  }

  /// Throws for a tensor no take() asked for: the file and the config disagree.
  void check_all_used() const {
    for (const GgufTensor& t : file_.tensors())
      if (used_.count(t.name) == 0)
        throw InputError(fmt::format(
            "GGUF file '{}' holds tensor '{}', which a {} model of this config does not have",
            file_.source(), t.name, file_.require_string("general.architecture")));
  }

  /// Widens every queued tensor, in chunks of rows spread over the OpenMP threads.
  void run() const {
    struct Chunk {
      const Job* job;
      std::uint64_t first;  // value index, a multiple of the row
      std::uint64_t count;
    };
    constexpr std::uint64_t kChunkValues = 1 << 16;
    std::vector<Chunk> chunks;
    for (const Job& j : jobs_) {
      const std::uint64_t row = j.tensor->dims[0];
      const std::uint64_t rows_per_chunk = std::max<std::uint64_t>(1, kChunkValues / row);
      const std::uint64_t n = j.tensor->elements();
      for (std::uint64_t first = 0; first < n; first += rows_per_chunk * row)
        chunks.push_back({&j, first, std::min(rows_per_chunk * row, n - first)});
    }
    const auto count = static_cast<std::ptrdiff_t>(chunks.size());
#pragma omp parallel for schedule(dynamic)
    for (std::ptrdiff_t i = 0; i < count; ++i) {
      const Chunk& c = chunks[i];
      const GgufTensor& t = *c.job->tensor;
      const GgmlTypeLayout l = ggml_type_layout(static_cast<GgmlType>(t.type));
      const std::uint64_t byte = c.first / l.block * l.block_bytes;
      dequantize(static_cast<GgmlType>(t.type), t.data + byte, c.job->out + c.first, c.count);
    }
  }

 private:
  const GgufFile& file_;
  std::vector<Job> jobs_;
  std::set<std::string> used_;
};

}  // namespace

std::string gguf_architectures() { return fmt::format("{}", fmt::join(kArchitectures, ", ")); }

ModelConfig gguf_config(const GgufFile& f) {
  const std::string& arch = f.require_string("general.architecture");
  if (std::find(kArchitectures.begin(), kArchitectures.end(), arch) == kArchitectures.end())
    throw InputError(fmt::format("GGUF file '{}' holds a '{}' model; kvheap serves {}", f.source(),
                                 arch, gguf_architectures()));
  const auto key = [&](const char* k) { return fmt::format("{}.{}", arch, k); };
  ModelConfig c;
  c.name = f.string_or("general.name");
  if (c.name.empty()) c.name = std::filesystem::path(f.source()).stem().string();
  c.n_layers = static_cast<int>(f.require_int(key("block_count"), 1, kIntMax));
  c.dim = static_cast<int>(f.require_int(key("embedding_length"), 1, kIntMax));
  c.hidden_dim = static_cast<int>(f.require_int(key("feed_forward_length"), 1, kIntMax));
  c.n_heads = static_cast<int>(f.require_int(key("attention.head_count"), 1, kIntMax));
  c.n_kv_heads = static_cast<int>(f.int_or(key("attention.head_count_kv"), c.n_heads, 1, kIntMax));
  c.head_dim =
      static_cast<int>(f.int_or(key("attention.key_length"), c.dim / c.n_heads, 1, kIntMax));
  const auto value_length = f.int_or(key("attention.value_length"), c.head_dim, 1, kIntMax);
  if (value_length != c.head_dim)
    throw InputError(
        fmt::format("GGUF file '{}': {} is {} but the key length is {}; kvheap's "
                    "heads have one width for K and V",
                    f.source(), key("attention.value_length"), value_length, c.head_dim));
  const auto rope_dims = f.int_or(key("rope.dimension_count"), c.head_dim, 1, kIntMax);
  if (rope_dims != c.head_dim)
    throw InputError(
        fmt::format("GGUF file '{}': {} is {}, but a head has {} dimensions; kvheap "
                    "rotates whole heads (no partial RoPE)",
                    f.source(), key("rope.dimension_count"), rope_dims, c.head_dim));
  c.max_seq_len = static_cast<int>(f.require_int(key("context_length"), 1, kIntMax));
  c.rope_theta = static_cast<float>(f.float_or(key("rope.freq_base"), 10000.0));
  if (f.find(key("attention.layer_norm_rms_epsilon")) == nullptr)
    throw InputError(fmt::format("GGUF file '{}': the required key '{}' is missing", f.source(),
                                 key("attention.layer_norm_rms_epsilon")));
  c.norm_eps = static_cast<float>(f.float_or(key("attention.layer_norm_rms_epsilon"), 0.0));
  const std::string scaling = f.string_or(key("rope.scaling.type"));
  if (!scaling.empty() && scaling != "none")
    throw InputError(
        fmt::format("GGUF file '{}': {} is '{}'; kvheap applies no RoPE scaling "
                    "from GGUF keys",
                    f.source(), key("rope.scaling.type"), scaling));
  c.rope_style = arch == "llama" ? RopeStyle::Interleaved : RopeStyle::Halves;
  c.attention_bias = f.tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = arch == "qwen3";
  c.tied_embeddings = f.tensor("output.weight") == nullptr;

  const GgufTensor* embd = f.tensor("token_embd.weight");
  if (embd == nullptr)
    throw InputError(fmt::format("GGUF file '{}' has no tensor 'token_embd.weight'", f.source()));
  if (embd->dims.size() != 2 || embd->dims[0] != static_cast<std::uint64_t>(c.dim) ||
      embd->dims[1] > static_cast<std::uint64_t>(kIntMax))
    throw InputError(
        fmt::format("GGUF file '{}': tensor 'token_embd.weight' has shape [{}]; "
                    "expected [{}, vocabulary]",
                    f.source(), fmt::join(embd->dims, ", "), c.dim));
  c.vocab_size = static_cast<int>(embd->dims[1]);
  const auto declared = f.int_or(key("vocab_size"), c.vocab_size, 1, kIntMax);
  const std::size_t tokens = f.strings("tokenizer.ggml.tokens", false).size();
  if (declared != c.vocab_size || (tokens != 0 && tokens != static_cast<std::size_t>(c.vocab_size)))
    throw InputError(
        fmt::format("GGUF file '{}': the vocabulary disagrees with the embedding: "
                    "token_embd.weight has {} rows, {} is {}, and the tokenizer "
                    "lists {} tokens",
                    f.source(), c.vocab_size, key("vocab_size"), declared, tokens));
  const auto vocab = static_cast<std::int64_t>(c.vocab_size) - 1;
  c.bos_id = static_cast<int>(f.int_or("tokenizer.ggml.bos_token_id", 1, 0, vocab));
  c.stop_ids.clear();
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                        "tokenizer.ggml.eom_token_id"}) {
    const auto id = f.int_or(k, -1, -1, vocab);
    if (id >= 0 && std::find(c.stop_ids.begin(), c.stop_ids.end(), id) == c.stop_ids.end())
      c.stop_ids.push_back(static_cast<int>(id));
  }
  try {
    c.validate();
  } catch (const InputError& e) {
    throw InputError(fmt::format("GGUF file '{}': {}", f.source(), e.what()));
  }
  return c;
}

ModelWeights load_gguf(const std::string& path) {
  const GgufFile f(path);
  ModelWeights w;
  w.config = gguf_config(f);
  const ModelConfig& c = w.config;
  const auto dim = static_cast<std::uint64_t>(c.dim);
  const auto q_dim = static_cast<std::uint64_t>(c.q_dim());
  const auto kv_dim = static_cast<std::uint64_t>(c.kv_dim());
  const auto hidden = static_cast<std::uint64_t>(c.hidden_dim);
  const auto vocab = static_cast<std::uint64_t>(c.vocab_size);
  const auto hd = static_cast<std::uint64_t>(c.head_dim);
  const std::string heads = fmt::format("dim {}, {} heads and {} KV heads of {}, FFN {}", c.dim,
                                        c.n_heads, c.n_kv_heads, c.head_dim, c.hidden_dim);
  Tensors t(f);
  w.token_embedding = t.take(w, "token_embd.weight", {dim, vocab}, "dim x vocabulary");
  w.final_norm = t.take(w, "output_norm.weight", {dim}, "dim");
  w.classifier = c.tied_embeddings ? w.token_embedding
                                   : t.take(w, "output.weight", {dim, vocab}, "dim x vocabulary");
  w.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[l];
    const auto n = [&](const char* s) { return fmt::format("blk.{}.{}", l, s); };
    L.attn_norm = t.take(w, n("attn_norm.weight"), {dim}, "dim");
    L.wq = t.take(w, n("attn_q.weight"), {dim, q_dim}, heads);
    L.wk = t.take(w, n("attn_k.weight"), {dim, kv_dim}, heads);
    L.wv = t.take(w, n("attn_v.weight"), {dim, kv_dim}, heads);
    L.wo = t.take(w, n("attn_output.weight"), {q_dim, dim}, heads);
    if (c.attention_bias) {
      L.bq = t.take(w, n("attn_q.bias"), {q_dim}, "a bias on every q/k/v projection");
      L.bk = t.take(w, n("attn_k.bias"), {kv_dim}, "a bias on every q/k/v projection");
      L.bv = t.take(w, n("attn_v.bias"), {kv_dim}, "a bias on every q/k/v projection");
    }
    if (c.qk_norm) {
      L.q_norm = t.take(w, n("attn_q_norm.weight"), {hd}, "qwen3 normalizes each q head");
      L.k_norm = t.take(w, n("attn_k_norm.weight"), {hd}, "qwen3 normalizes each k head");
    }
    L.ffn_norm = t.take(w, n("ffn_norm.weight"), {dim}, "dim");
    L.w1 = t.take(w, n("ffn_gate.weight"), {dim, hidden}, heads);
    L.w2 = t.take(w, n("ffn_down.weight"), {hidden, dim}, heads);
    L.w3 = t.take(w, n("ffn_up.weight"), {dim, hidden}, heads);
  }
  // Llama 3.1's long-context scaling, as its converter stores it: a divisor per frequency.
  const float* factors = f.tensor("rope_freqs.weight") == nullptr
                             ? nullptr
                             : t.take(w, "rope_freqs.weight", {hd / 2}, "a divisor per frequency");
  t.check_all_used();
  t.run();
  if (factors != nullptr) {
    w.config.rope_freq_factors.assign(factors, factors + hd / 2);
    try {
      w.config.validate();
    } catch (const InputError& e) {
      throw InputError(fmt::format("GGUF file '{}': {}", f.source(), e.what()));
    }
  }
  return w;
}

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  std::array<char, 4> magic{};
  in.read(magic.data(), magic.size());
  return in.gcount() == 4 && std::memcmp(magic.data(), "GGUF", 4) == 0;
}

}  // namespace kvheap
