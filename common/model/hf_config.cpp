// config.json -> ModelConfig, with a message naming the key for every field that is missing,
// mistyped or unsupported.
#include "common/model/hf_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "common/util/file_checks.hpp"

namespace kvheap {

namespace {

using nlohmann::json;

// Families whose checkpoints are plain Llama blocks under the same tensor names (Qwen3 adds a
// per-head RMSNorm of q and k). Others (Gemma's offset norms, Phi's fused projections) would load
// and then compute the wrong thing.
constexpr const char* kSupportedModelTypes[] = {"llama", "mistral", "qwen2", "qwen3"};

// transformers' Qwen3Config defaults head_dim to 128 rather than hidden_size / heads: Qwen3's
// heads are wider than the residual stream divided among them (Qwen3-0.6B: 16 x 128 > 1024).
constexpr int kQwen3DefaultHeadDim = 128;

// Real config.json files are a few kilobytes; the limit only stops a wrong path (a checkpoint,
// say) from being read into memory whole.
constexpr std::uint64_t kMaxConfigBytes = 16 << 20;
constexpr const char* kConfigExpected = "a Hugging Face config.json (a JSON object)";

const json* find_value(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// Huge values are left for validate() to reject with its range message, but must not wrap first.
int to_int(const json& v, const char* key, const std::string& where) {
  if (!v.is_number_integer())
    throw InputError(fmt::format("'{}': \"{}\" must be an integer, got {}", where, key, v.dump()));
  const bool fits = v.is_number_unsigned()
                        ? v.get<std::uint64_t>() <= INT_MAX
                        : v.get<std::int64_t>() >= INT_MIN && v.get<std::int64_t>() <= INT_MAX;
  if (!fits)
    throw InputError(
        fmt::format("'{}': \"{}\" = {} does not fit in a 32-bit int", where, key, v.dump()));
  return static_cast<int>(v.get<std::int64_t>());
}

int get_int(const json& j, const char* key, const std::string& where,
            std::optional<int> fallback = std::nullopt) {
  const json* v = find_value(j, key);
  if (v == nullptr) {
    if (fallback) return *fallback;
    throw InputError(fmt::format("'{}' is missing required key \"{}\"", where, key));
  }
  return to_int(*v, key, where);
}

// config.json numbers are doubles; kvheap keeps them as float. A value beyond float's range would
// become inf (and the cast itself is undefined behaviour), and one below it would become 0, which
// validate() would then report as "got 0", a value nobody wrote. `text` is the value as written.
float to_float(double d, const char* key, const std::string& where, const std::string& text) {
  if (std::fabs(d) > std::numeric_limits<float>::max())
    throw InputError(fmt::format("'{}': \"{}\" = {} is too large for a 32-bit float (at most {})",
                                 where, key, text, std::numeric_limits<float>::max()));
  const auto f = static_cast<float>(d);
  if (f == 0.0f && d != 0.0)
    throw InputError(fmt::format(
        "'{}': \"{}\" = {} underflows to 0 in a 32-bit float (the smallest positive float is "
        "{:.2g})",
        where, key, text, std::numeric_limits<float>::denorm_min()));
  return f;
}

float get_float(const json& j, const char* key, const std::string& where,
                std::optional<float> fallback = std::nullopt) {
  const json* v = find_value(j, key);
  if (v == nullptr) {
    if (fallback) return *fallback;
    throw InputError(fmt::format("'{}' is missing required key \"{}\"", where, key));
  }
  if (!v->is_number())
    throw InputError(fmt::format("'{}': \"{}\" must be a number, got {}", where, key, v->dump()));
  return to_float(v->get<double>(), key, where, v->dump());
}

bool get_bool(const json& j, const char* key, const std::string& where, bool fallback) {
  const json* v = find_value(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean())
    throw InputError(
        fmt::format("'{}': \"{}\" must be true or false, got {}", where, key, v->dump()));
  return v->get<bool>();
}

std::string get_string(const json& j, const char* key, const std::string& where,
                       const std::string& fallback) {
  const json* v = find_value(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_string())
    throw InputError(fmt::format("'{}': \"{}\" must be a string, got {}", where, key, v->dump()));
  return v->get<std::string>();
}

// `rs` is a rope_scaling object or, in newer configs, the rope_parameters object; `key` names it.
// A rope_parameters object may leave the type out (plain RoPE); a rope_scaling object exists only
// to scale, so there a missing type is reported like an unknown one.
RopeScaling parse_rope_type(const json& rs, const char* key, const std::string& where) {
  RopeScaling s;
  // Newer transformers write "rope_type"; older configs wrote "type".
  std::string type = get_string(rs, "rope_type", where, "");
  if (type.empty()) type = get_string(rs, "type", where, "");
  if (type.empty() && std::string_view(key) == "rope_parameters") return s;
  if (type == "default") return s;  // transformers' spelling of "no scaling"
  if (type != "llama3")
    throw InputError(
        fmt::format("'{}': unsupported {} type '{}'; kvheap supports "
                    "\"llama3\" scaling or none",
                    where, key, type));
  const std::string in = fmt::format("{} {}", where, key);
  s.enabled = true;
  s.factor = get_float(rs, "factor", in);
  s.low_freq_factor = get_float(rs, "low_freq_factor", in);
  s.high_freq_factor = get_float(rs, "high_freq_factor", in);
  s.original_max_position = get_int(rs, "original_max_position_embeddings", in);
  return s;
}

RopeScaling parse_rope_scaling(const json& j, const std::string& where) {
  const json* rs = find_value(j, "rope_scaling");
  if (rs == nullptr) return {};
  if (!rs->is_object())
    throw InputError(
        fmt::format("'{}': \"rope_scaling\" must be an object or null, got {}", where, rs->dump()));
  return parse_rope_type(*rs, "rope_scaling", where);
}

// transformers 5 writes RoPE's settings as "rope_parameters": {"rope_type", "rope_theta", and the
// scaling factors}, and may leave out the top-level rope_theta; reading only that key would then
// fall back to 10000 and silently run another model. Where both are given they must agree.
void parse_rope_parameters(const json& j, const std::string& where, ModelConfig& c) {
  const json* rp = find_value(j, "rope_parameters");
  if (rp == nullptr) return;
  if (!rp->is_object() || find_value(*rp, "rope_theta") == nullptr)
    throw InputError(
        fmt::format("'{}': \"rope_parameters\" must be an object with a \"rope_theta\" (one RoPE "
                    "for every layer), got {}",
                    where, rp->dump()));
  const std::string in = where + " rope_parameters";
  const float theta = get_float(*rp, "rope_theta", in);
  if (find_value(j, "rope_theta") != nullptr && c.rope_theta != theta)
    throw InputError(
        fmt::format("'{}': \"rope_theta\" = {} disagrees with \"rope_parameters\" rope_theta = {}; "
                    "expected one RoPE base",
                    where, c.rope_theta, theta));
  c.rope_theta = theta;
  const float partial = get_float(*rp, "partial_rotary_factor", in, 1.0f);
  if (partial != 1.0f)
    throw InputError(fmt::format(
        "'{}': \"partial_rotary_factor\" = {} is not supported; kvheap rotates whole heads (1.0)",
        in, partial));
  c.rope_scaling = parse_rope_type(*rp, "rope_parameters", where);
}

// "eos_token_id": an id or a list of them; nullopt when absent or null.
std::optional<std::vector<int>> parse_eos_ids(const json& j, const std::string& where) {
  const json* v = find_value(j, "eos_token_id");
  if (v == nullptr) return std::nullopt;
  if (!v->is_array()) return std::vector<int>{get_int(j, "eos_token_id", where)};
  std::vector<int> ids;
  for (const json& id : *v) ids.push_back(to_int(id, "eos_token_id", where));
  if (ids.empty()) throw InputError(fmt::format("'{}': \"eos_token_id\" is an empty list", where));
  return ids;
}

// Reads `path` (at most kMaxConfigBytes) as a JSON object; `what` names the file's role.
json read_json_object(const std::string& path, std::string_view what, std::string_view expected) {
  // A directory, FIFO or device named like the file is an error here, not a stream failure later.
  const std::string text = read_regular_file(path, what, expected, kMaxConfigBytes);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw InputError(fmt::format("'{}' is not valid JSON: {}", path, e.what()));
  }
  return j;
}

// generation_config.json's stop ids, when the folder has the file and it names some. transformers
// loads this file as the generation settings and prefers it to config.json; Qwen3 relies on that,
// listing <|im_end|> and <|endoftext|> here where config.json names only the first.
std::optional<std::vector<int>> generation_stop_ids(const std::filesystem::path& dir,
                                                    const ModelConfig& c) {
  const std::filesystem::path path = dir / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const std::string where = path.string();
  const json j = read_json_object(where, "generation config",
                                  "a Hugging Face generation_config.json (a JSON object)");
  if (!j.is_object())
    throw InputError(fmt::format("'{}' must hold a JSON object, got {}", where, j.type_name()));
  std::optional<std::vector<int>> ids = parse_eos_ids(j, where);
  for (int id : ids.value_or(std::vector<int>{}))
    if (id < 0 || id >= c.vocab_size)
      throw InputError(
          fmt::format("'{}': \"eos_token_id\" {} is not a token of the model: config.json's "
                      "vocab_size is {} (ids 0..{})",
                      where, id, c.vocab_size, c.vocab_size - 1));
  return ids;
}

// Sliding-window attention (Mistral v0.1) lets each query see only the last `sliding_window`
// keys. kvheap attends to the whole context, which is the same thing only while the window covers
// every position the model accepts; a smaller window would silently change the outputs.
void check_sliding_window(const json& j, const std::string& where, int max_positions,
                          bool window_on_by_default) {
  // Qwen2 and Qwen3 configs carry a window that applies only with "use_sliding_window": true,
  // which is off when absent; Mistral's applies whenever it is set.
  if (!get_bool(j, "use_sliding_window", where, window_on_by_default)) return;
  const json* v = find_value(j, "sliding_window");
  if (v == nullptr) return;
  if (!v->is_number_integer())
    throw InputError(fmt::format("'{}': \"sliding_window\" must be an integer or null, got {}",
                                 where, v->dump()));
  const bool covers = v->is_number_unsigned()
                          ? v->get<std::uint64_t>() >= static_cast<std::uint64_t>(max_positions)
                          : v->get<std::int64_t>() >= max_positions;
  if (covers) return;
  throw InputError(
      fmt::format("'{}': \"sliding_window\" = {} is smaller than max_position_embeddings ({}): "
                  "sliding-window attention is not supported (kvheap attends to the whole "
                  "context); expected null or a window of at least {}",
                  where, v->dump(), max_positions, max_positions));
}

// "/models/llama/" and "/models/llama" are both named "llama".
std::string folder_name(const std::string& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace

ModelConfig parse_hf_config(const json& j, const std::string& name, const std::string& where) {
  if (!j.is_object())
    throw InputError(fmt::format("'{}' must hold a JSON object, got {}", where, j.type_name()));

  // Without it every field would be read as llama's, which a Qwen or Mistral config is not.
  if (!j.contains("model_type"))
    throw InputError(
        fmt::format("'{}' has no model_type; expected one of {} (a Hugging Face "
                    "config.json names its architecture there)",
                    where, fmt::join(kSupportedModelTypes, ", ")));
  const std::string model_type = get_string(j, "model_type", where, "");
  if (std::find(std::begin(kSupportedModelTypes), std::end(kSupportedModelTypes), model_type) ==
      std::end(kSupportedModelTypes))
    throw InputError(fmt::format("'{}': unsupported model_type '{}'; kvheap loads {}", where,
                                 model_type, fmt::join(kSupportedModelTypes, ", ")));
  const std::string act = get_string(j, "hidden_act", where, "silu");
  if (act != "silu")
    throw InputError(fmt::format("'{}': unsupported hidden_act '{}'; kvheap's MLP is SwiGLU (silu)",
                                 where, act));
  if (get_bool(j, "mlp_bias", where, false))
    throw InputError(
        fmt::format("'{}': \"mlp_bias\": true is not supported (no MLP biases)", where));

  ModelConfig c;
  c.name = name;
  c.dim = get_int(j, "hidden_size", where);
  c.hidden_dim = get_int(j, "intermediate_size", where);
  c.n_layers = get_int(j, "num_hidden_layers", where);
  c.n_heads = get_int(j, "num_attention_heads", where);
  c.n_kv_heads = get_int(j, "num_key_value_heads", where, c.n_heads);
  const bool qwen3 = model_type == "qwen3";
  if (find_value(j, "head_dim") == nullptr && !qwen3 && c.n_heads > 0 && c.dim % c.n_heads != 0)
    throw InputError(
        fmt::format("'{}': hidden_size ({}) must be divisible by num_attention_heads "
                    "({}) when there is no head_dim",
                    where, c.dim, c.n_heads));
  const int default_head_dim = qwen3 ? kQwen3DefaultHeadDim : c.n_heads > 0 ? c.dim / c.n_heads : 0;
  c.head_dim = get_int(j, "head_dim", where, default_head_dim);
  c.vocab_size = get_int(j, "vocab_size", where);
  c.max_seq_len = get_int(j, "max_position_embeddings", where);
  c.rope_theta = get_float(j, "rope_theta", where, 10000.0f);
  c.norm_eps = get_float(j, "rms_norm_eps", where, 1e-6f);
  c.tied_embeddings = get_bool(j, "tie_word_embeddings", where, false);
  c.attention_bias = get_bool(j, "attention_bias", where, model_type == "qwen2");
  c.qk_norm = qwen3;
  c.rope_style = RopeStyle::Halves;  // HF checkpoints permute q/k for rotate-half RoPE
  c.rope_scaling = parse_rope_scaling(j, where);
  parse_rope_parameters(j, where, c);
  c.bos_id = get_int(j, "bos_token_id", where, 1);
  c.stop_ids = parse_eos_ids(j, where).value_or(std::vector<int>{2});  // LlamaConfig's default
  try {
    c.validate();
  } catch (const InputError& e) {
    throw InputError(fmt::format("'{}': {}", where, e.what()));
  }
  check_sliding_window(j, where, c.max_seq_len,
                       model_type != "qwen2" && !qwen3);  // after validate(): max_seq_len > 0
  return c;
}

ModelConfig load_hf_config(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError(
        fmt::format("model folder '{}' has no readable config.json; a Hugging Face "
                    "model folder holds config.json next to its .safetensors files",
                    dir));
  const json j = read_json_object(path.string(), "model config", kConfigExpected);
  ModelConfig c = parse_hf_config(j, folder_name(dir), path.string());
  if (auto ids = generation_stop_ids(dir, c)) c.stop_ids = std::move(*ids);
  return c;
}

std::vector<int> load_hf_stop_ids(const std::string& dir) { return load_hf_config(dir).stop_ids; }

}  // namespace kvheap
