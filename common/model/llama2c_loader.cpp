// llama2.c checkpoint loader: header parsing, size validation, and in-place tensor views.
//
// Tensor order, both formats (each "stacked" tensor is [n_layers, ...] for all layers at once):
//   version 0: token embedding, attn norm, wq, wk, wv, wo, ffn norm, w1, w2, w3, final norm,
//              two RoPE tables (skipped), classifier if unshared (signalled by vocab_size < 0)
//   version 1: attn norm, ffn norm, final norm, token embedding, wq, wk, wv, wo, w1, w2, w3,
//              classifier if unshared (signalled by the header's shared-classifier byte == 0)
#include "common/model/llama2c_loader.hpp"

#include <fmt/format.h>

#include <bit>
#include <climits>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>

#include "base/error.hpp"
#include "common/util/mapped_file.hpp"

namespace kvheap {

// The tensors are used in place, so the file's little-endian fp32 must be the host's layout.
static_assert(std::endian::native == std::endian::little, "llama2.c loader assumes little-endian");

namespace {

using u64 = std::uint64_t;

// Checked arithmetic: a garbage header must produce an error, not a size that wrapped around.
u64 mul(u64 a, u64 b) {
  if (a != 0 && b > std::numeric_limits<u64>::max() / a)
    throw InputError("llama2.c checkpoint size overflows 64 bits; the header is corrupt");
  return a * b;
}
u64 add(u64 a, u64 b) {
  if (b > std::numeric_limits<u64>::max() - a)
    throw InputError("llama2.c checkpoint size overflows 64 bits; the header is corrupt");
  return a + b;
}

// memcpy rather than a cast: header fields are not guaranteed aligned for every offset we read.
std::int32_t read_i32(const std::byte* p) {
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

struct Header {
  int version = 0;
  std::size_t bytes = 0;  // where the first tensor starts
  ModelConfig config;
};

std::string shape_summary(const ModelConfig& c) {
  return fmt::format(
      "dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, vocab_size {}, "
      "seq_len {}, {} classifier",
      c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.max_seq_len,
      c.tied_embeddings ? "shared" : "separate");
}

// Fills the config from the seven header fields and rejects impossible shapes, before anything
// is sized from them.
ModelConfig make_config(const std::string& path, const std::byte* fields, int vocab_size,
                        bool tied) {
  ModelConfig c;
  c.name = std::filesystem::path(path).stem().string();
  c.dim = read_i32(fields + 0);
  c.hidden_dim = read_i32(fields + 4);
  c.n_layers = read_i32(fields + 8);
  c.n_heads = read_i32(fields + 12);
  c.n_kv_heads = read_i32(fields + 16);
  c.vocab_size = vocab_size;
  c.max_seq_len = read_i32(fields + 24);
  c.tied_embeddings = tied;
  c.rope_style = RopeStyle::Interleaved;  // llama2.c rotates pairs (2i, 2i+1)
  c.bos_id = 1;
  c.stop_ids = {1};  // llama2.c stops when the model emits BOS again
  // llama2.c has no head_dim field: it is dim / n_heads, and a remainder would silently drop
  // columns. Range errors are reported first (a garbage header should read as garbage), so a
  // non-dividing shape gets a placeholder head_dim until validate() has seen the other fields.
  const bool divides = c.n_heads > 0 && c.dim % c.n_heads == 0;
  c.head_dim = divides ? c.dim / c.n_heads : 2;
  try {
    c.validate();
  } catch (const InputError& e) {
    throw InputError(
        fmt::format("checkpoint '{}': {} (is this a llama2.c checkpoint?)", path, e.what()));
  }
  if (!divides)
    throw InputError(
        fmt::format("checkpoint '{}': invalid model config: dim ({}) must be divisible "
                    "by n_heads ({})",
                    path, c.dim, c.n_heads));
  return c;
}

Header parse_header(const MappedFile& f) {
  const std::byte* p = f.data();
  const std::size_t size = f.size();
  Header h;
  std::uint32_t magic = 0;
  if (size >= 4) std::memcpy(&magic, p, 4);

  if (magic == kLlama2cMagic) {
    if (size < kLlama2cV1HeaderBytes)
      throw InputError(
          fmt::format("checkpoint '{}' truncated: a llama2.c version 1 header needs {} "
                      "bytes, found {}",
                      f.path(), kLlama2cV1HeaderBytes, size));
    h.version = read_i32(p + 4);
    if (h.version != 1)
      throw InputError(fmt::format(
          "checkpoint '{}' is llama2.c format version {}; kvheap reads version 1 (fp32) and the "
          "legacy version 0{}",
          f.path(), h.version,
          h.version == 2 ? " (version 2 is int8-quantized; export with --version 1 instead)" : ""));
    const auto shared = static_cast<unsigned char>(p[36]);
    if (shared > 1)
      throw InputError(fmt::format("checkpoint '{}': shared-classifier flag must be 0 or 1, got {}",
                                   f.path(), shared));
    h.bytes = kLlama2cV1HeaderBytes;
    h.config = make_config(f.path(), p + 8, read_i32(p + 28), shared == 1);
    return h;
  }

  if (size < kLlama2cV0HeaderBytes)
    throw InputError(
        fmt::format("checkpoint '{}' truncated: a llama2.c header needs {} bytes, "
                    "found {}",
                    f.path(), kLlama2cV0HeaderBytes, size));
  // Legacy files encode an unshared classifier as a negative vocab_size. INT_MIN has no positive
  // counterpart; pass it through so validation rejects it by value.
  const std::int32_t raw_vocab = read_i32(p + 20);
  const int vocab = raw_vocab < 0 && raw_vocab != INT_MIN ? -raw_vocab : raw_vocab;
  h.version = 0;
  h.bytes = kLlama2cV0HeaderBytes;
  h.config = make_config(f.path(), p, vocab, raw_vocab > 0);
  return h;
}

}  // namespace

u64 llama2c_file_size(const ModelConfig& c, int version) {
  if (version != 0 && version != 1)
    throw InputError(fmt::format("llama2.c format version must be 0 or 1, got {}", version));
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.head_dim <= 0 || c.vocab_size <= 0 ||
      c.max_seq_len <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0)
    throw InputError("llama2c_file_size needs a validated config with positive sizes");
  const u64 d = static_cast<u64>(c.dim), hidden = static_cast<u64>(c.hidden_dim);
  const u64 layers = static_cast<u64>(c.n_layers), vocab = static_cast<u64>(c.vocab_size);
  const u64 q = static_cast<u64>(c.q_dim()), kv = static_cast<u64>(c.kv_dim());

  // Per layer: two RMSNorm gains, wq [q, d], wk and wv [kv, d], wo [d, q], w1 and w3 [hidden, d],
  // w2 [d, hidden].
  u64 per_layer = mul(2, d);
  per_layer = add(per_layer, mul(2, mul(q, d)));
  per_layer = add(per_layer, mul(2, mul(kv, d)));
  per_layer = add(per_layer, mul(3, mul(hidden, d)));

  u64 floats = add(mul(vocab, d), mul(layers, per_layer));  // embedding + blocks
  floats = add(floats, d);                                  // final norm
  if (version == 0) {
    // Two RoPE tables (cos, sin) of [seq_len, head_dim/2] floats each.
    floats = add(floats, mul(static_cast<u64>(c.max_seq_len), static_cast<u64>(c.head_dim)));
  }
  if (!c.tied_embeddings) floats = add(floats, mul(vocab, d));
  const u64 header = version == 0 ? kLlama2cV0HeaderBytes : kLlama2cV1HeaderBytes;
  return add(header, mul(floats, sizeof(float)));
}

ModelWeights load_llama2c(const std::string& path) {
  auto file = std::make_shared<const MappedFile>(path);
  const Header h = parse_header(*file);
  const ModelConfig& c = h.config;

  const u64 expected = llama2c_file_size(c, h.version);
  const u64 found = file->size();
  if (found < expected)
    throw InputError(
        fmt::format("checkpoint '{}' truncated: expected {} bytes for {} (llama2.c "
                    "version {}), found {}",
                    path, expected, shape_summary(c), h.version, found));
  if (found > expected)
    throw InputError(
        fmt::format("checkpoint '{}' has {} trailing bytes beyond the {} that the "
                    "header describes ({}, llama2.c version {}); the header does not "
                    "match the tensors",
                    path, found - expected, expected, shape_summary(c), h.version));

  ModelWeights w;
  w.config = c;
  w.layers.resize(static_cast<std::size_t>(c.n_layers));

  // The size check above guarantees every take() below stays inside the mapping. The mapping is
  // page-aligned and both header sizes are multiples of 4, so the floats are aligned too.
  const float* cursor = reinterpret_cast<const float*>(file->data() + h.bytes);
  auto take = [&](std::size_t n) {
    const float* t = cursor;
    cursor += n;
    return t;
  };
  // A stacked tensor holds one [each] slice per layer, back to back.
  auto stacked = [&](std::size_t each, const float* LayerWeights::*field) {
    const float* base = take(each * w.layers.size());
    for (std::size_t l = 0; l < w.layers.size(); ++l) w.layers[l].*field = base + l * each;
  };

  // validate() bounded every field, so these products fit in size_t with room to spare.
  const std::size_t d = c.dim, hid = c.hidden_dim, vocab = c.vocab_size;
  const std::size_t q = c.q_dim(), kv = c.kv_dim();

  if (h.version == 0) {
    w.token_embedding = take(vocab * d);   // [vocab_size, dim]
    stacked(d, &LayerWeights::attn_norm);  // [n_layers, dim]
    stacked(q * d, &LayerWeights::wq);     // [n_layers, q_dim, dim]
    stacked(kv * d, &LayerWeights::wk);    // [n_layers, kv_dim, dim]
    stacked(kv * d, &LayerWeights::wv);    // [n_layers, kv_dim, dim]
    stacked(d * q, &LayerWeights::wo);     // [n_layers, dim, q_dim]
    stacked(d, &LayerWeights::ffn_norm);   // [n_layers, dim]
    stacked(hid * d, &LayerWeights::w1);   // [n_layers, hidden_dim, dim]
    stacked(d * hid, &LayerWeights::w2);   // [n_layers, dim, hidden_dim]
    stacked(hid * d, &LayerWeights::w3);   // [n_layers, hidden_dim, dim]
    w.final_norm = take(d);                // [dim]
    // Precomputed RoPE cos/sin tables, [seq_len, head_dim/2] each: the forward pass computes its
    // own (with the configured theta and scaling), so these are skipped.
    (void)take(2 * static_cast<std::size_t>(c.max_seq_len) * (c.head_dim / 2));
  } else {
    stacked(d, &LayerWeights::attn_norm);  // [n_layers, dim]
    stacked(d, &LayerWeights::ffn_norm);   // [n_layers, dim]
    w.final_norm = take(d);                // [dim]
    w.token_embedding = take(vocab * d);   // [vocab_size, dim]
    stacked(q * d, &LayerWeights::wq);     // [n_layers, q_dim, dim]
    stacked(kv * d, &LayerWeights::wk);    // [n_layers, kv_dim, dim]
    stacked(kv * d, &LayerWeights::wv);    // [n_layers, kv_dim, dim]
    stacked(d * q, &LayerWeights::wo);     // [n_layers, dim, q_dim]
    stacked(hid * d, &LayerWeights::w1);   // [n_layers, hidden_dim, dim]
    stacked(d * hid, &LayerWeights::w2);   // [n_layers, dim, hidden_dim]
    stacked(hid * d, &LayerWeights::w3);   // [n_layers, hidden_dim, dim]
  }
  w.classifier = c.tied_embeddings ? w.token_embedding : take(vocab * d);  // [vocab_size, dim]
  // The walk above and llama2c_file_size() describe the same layout; if they ever disagree, that
  // is a bug here, not a bad file.
  if (reinterpret_cast<const std::byte*>(cursor) != file->data() + file->size())
    throw std::logic_error("llama2.c loader: tensor walk does not end at the computed file size");

  w.storage.push_back(std::move(file));
  return w;
}

}  // namespace kvheap
