// Tests for the Hugging Face loader: round trips in every dtype, single-file and sharded, the
// config.json features kvheap honours (tied classifier, Qwen2 biases, Qwen3 q/k norms, llama3 RoPE
// scaling, rope_parameters, stop tokens from generation_config.json), and a named, actionable
// error for each way a folder can be malformed.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <tuple>

#include "base/error.hpp"
#include "common/model/hf_config.hpp"
#include "common/model/safetensors_loader.hpp"
#include "tests/support/checkpoint_writers.hpp"

namespace kvheap {
namespace {

using nlohmann::json;
using test::input_error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

// The tiny preset as a Hugging Face export: 2 layers, 4 query heads over 2 KV heads.
ModelConfig hf_config(bool tied = true) {
  ModelConfig c = preset("tiny");
  c.rope_style = RopeStyle::Halves;
  c.tied_embeddings = tied;
  c.stop_ids = {2};
  return c;
}

// A folder holding a good F32 export of seeded weights; tests then break one thing in it.
struct Folder {
  test::TempDir tmp;
  std::string dir = tmp.file("tiny-llama");
  ModelWeights weights;

  explicit Folder(const ModelConfig& c = hf_config(), DType dtype = DType::F32, int shards = 1)
      : weights(test::random_weights(c, 42)) {
    test::write_safetensors(weights, dir, dtype, shards);
  }
  [[nodiscard]] std::string file(const std::string& name) const { return dir + "/" + name; }
  [[nodiscard]] std::string error() const {
    return input_error_of([&] { return load_safetensors(dir); });
  }
};

// A .safetensors file taken apart: each tensor's header entry with its own bytes. Tests add, drop
// or copy tensors here, and rewrite_tensors lays the data region out again so that it stays
// exactly covered; the loader rejects overlaps and gaps before it looks at any tensor.
struct RawTensor {
  json entry;  // dtype and shape; data_offsets are recomputed on writing
  std::string bytes;
};
using RawTensors = std::map<std::string, RawTensor>;

void rewrite_tensors(const std::string& path, const std::function<void(RawTensors&)>& edit) {
  const std::string file = test::read_bytes(path);
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  const json header = json::parse(file.substr(8, n));
  const std::string data = file.substr(8 + n);
  RawTensors tensors;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const auto begin = e["data_offsets"][0].get<std::size_t>();
    const auto end = e["data_offsets"][1].get<std::size_t>();
    tensors[name] = {e, data.substr(begin, end - begin)};
  }
  edit(tensors);
  json out = {{"__metadata__", header.value("__metadata__", json::object())}};
  std::string region;
  for (const auto& [name, t] : tensors) {
    out[name] = t.entry;
    out[name]["data_offsets"] = {region.size(), region.size() + t.bytes.size()};
    region += t.bytes;
  }
  const std::string text = out.dump();
  const std::uint64_t len = text.size();
  test::write_bytes(path, std::string(reinterpret_cast<const char*>(&len), 8) + text + region);
}

class SafetensorsRoundTrip : public ::testing::TestWithParam<std::tuple<DType, int>> {};

TEST_P(SafetensorsRoundTrip, LoadsExactlyTheStoredValues) {
  const auto [dtype, shards] = GetParam();
  const Folder f(hf_config(), dtype, shards);
  if (shards > 1) {
    EXPECT_TRUE(std::filesystem::exists(f.file("model-00003-of-00003.safetensors")));
  }
  const ModelWeights got = load_safetensors(f.dir);
  // F16/BF16 come back as the exact widening of what was written, not merely close to fp32.
  test::expect_same_tensors(got, f.weights, dtype);
  const ModelConfig& c = got.config;
  EXPECT_EQ(c.name, "tiny-llama");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 160);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.vocab_size, 128);
  EXPECT_EQ(c.max_seq_len, 96);
  EXPECT_EQ(c.rope_style, RopeStyle::Halves);
  EXPECT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.stop_ids, std::vector<int>{2});
}

INSTANTIATE_TEST_SUITE_P(DTypesAndShards, SafetensorsRoundTrip,
                         ::testing::Combine(::testing::Values(DType::F32, DType::F16, DType::BF16),
                                            ::testing::Values(1, 3)),
                         [](const auto& info) {
                           return fmt::format("{}_{}shard", dtype_name(std::get<0>(info.param)),
                                              std::get<1>(info.param));
                         });

TEST(SafetensorsLoader, TiedAndUntiedClassifiers) {
  const Folder tied(hf_config(true));
  const ModelWeights t = load_safetensors(tied.dir);
  EXPECT_TRUE(t.config.tied_embeddings);
  EXPECT_EQ(t.classifier, t.token_embedding);

  Folder untied(hf_config(false));
  const ModelWeights u = load_safetensors(untied.dir);
  EXPECT_FALSE(u.config.tied_embeddings);
  EXPECT_NE(u.classifier, u.token_embedding);
  test::expect_same_tensors(u, untied.weights);

  // config.json decides: an lm_head.weight in a tied folder is ignored, not loaded.
  test::edit_json_file(untied.file("config.json"),
                       [](json& j) { j["tie_word_embeddings"] = true; });
  const ModelWeights ignored = load_safetensors(untied.dir);
  EXPECT_EQ(ignored.classifier, ignored.token_embedding);
}

TEST(SafetensorsLoader, Qwen2BiasesAreLoaded) {
  ModelConfig c = hf_config();
  c.attention_bias = true;  // the writer emits model_type "qwen2" and no attention_bias key
  c.head_dim = 8;           // q_dim 32 != dim 64: wo is [dim, q_dim], not square
  const Folder f(c);
  const ModelWeights got = load_safetensors(f.dir);
  EXPECT_TRUE(got.config.attention_bias);
  EXPECT_EQ(got.config.q_dim(), 32);
  ASSERT_NE(got.layers[1].bq, nullptr);
  ASSERT_NE(got.layers[1].bv, nullptr);
  test::expect_same_tensors(got, f.weights);
}

TEST(SafetensorsLoader, OutputProjectionBiasIsRejectedNotDropped) {
  const Folder f;
  rewrite_tensors(f.file("model.safetensors"), [](RawTensors& t) {
    t["model.layers.0.self_attn.o_proj.bias"] = t["model.norm.weight"];  // any [dim] F32 bytes
  });
  EXPECT_THAT(f.error(), AllOf(HasSubstr("o_proj.bias"), HasSubstr("q/k/v only")));
}

TEST(SafetensorsLoader, Llama3RopeScalingIsParsed) {
  ModelConfig c = hf_config();
  c.rope_scaling = {true, 32.0f, 1.0f, 4.0f, 8192};
  const Folder f(c);
  const RopeScaling s = load_safetensors(f.dir).config.rope_scaling;
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.factor, 32.0f);
  EXPECT_EQ(s.low_freq_factor, 1.0f);
  EXPECT_EQ(s.high_freq_factor, 4.0f);
  EXPECT_EQ(s.original_max_position, 8192);
  // Older configs spell the key "type".
  test::edit_json_file(f.file("config.json"), [](json& j) {
    j["rope_scaling"].erase("rope_type");
    j["rope_scaling"]["type"] = "llama3";
  });
  EXPECT_TRUE(load_safetensors(f.dir).config.rope_scaling.enabled);
}

TEST(SafetensorsLoader, UnknownRopeScalingTypeIsNamed) {
  const Folder f;
  test::edit_json_file(f.file("config.json"), [](json& j) {
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  });
  EXPECT_THAT(f.error(), AllOf(HasSubstr("rope_scaling type 'yarn'"), HasSubstr("llama3")));
}

TEST(SafetensorsLoader, ConfigDefaultsFollowTransformers) {
  const Folder f;
  test::edit_json_file(f.file("config.json"), [](json& j) {
    for (const char* k :
         {"num_key_value_heads", "head_dim", "rope_theta", "tie_word_embeddings", "rope_scaling"})
      j.erase(k);
    j["eos_token_id"] = {2, 5};
  });
  rewrite_tensors(f.file("model.safetensors"), [](RawTensors& t) {  // kv heads now = 4
    for (int l = 0; l < 2; ++l)
      for (const char* p : {"k_proj", "v_proj"})
        t[fmt::format("model.layers.{}.self_attn.{}.weight", l, p)] =
            t[fmt::format("model.layers.{}.self_attn.q_proj.weight", l)];
    t["lm_head.weight"] = t["model.embed_tokens.weight"];  // untied by default
  });
  const ModelConfig c = load_safetensors(f.dir + "/").config;
  EXPECT_EQ(c.name, "tiny-llama");  // a trailing slash does not empty the name
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.stop_ids, (std::vector<int>{2, 5}));
}

TEST(SafetensorsLoader, UnknownDtypeIsNamedWithTheSupportedOnes) {
  const Folder f;
  test::edit_safetensors_header(f.file("model.safetensors"),
                                [](json& h) { h["model.norm.weight"]["dtype"] = "I8"; });
  EXPECT_THAT(f.error(), AllOf(HasSubstr("'model.norm.weight'"), HasSubstr("dtype 'I8'"),
                               HasSubstr("F32, F16 and BF16")));
}

TEST(SafetensorsLoader, MissingTensorIsNamed) {
  const Folder f;
  rewrite_tensors(f.file("model.safetensors"),
                  [](RawTensors& t) { t.erase("model.layers.1.mlp.up_proj.weight"); });
  EXPECT_THAT(f.error(), HasSubstr("missing tensor 'model.layers.1.mlp.up_proj.weight'"));

  const Folder sharded(hf_config(), DType::F32, 3);
  test::edit_json_file(sharded.file("model.safetensors.index.json"),
                       [](json& j) { j["weight_map"].erase("model.norm.weight"); });
  EXPECT_THAT(sharded.error(),
              AllOf(HasSubstr("missing tensor 'model.norm.weight'"), HasSubstr("weight_map")));
}

TEST(SafetensorsLoader, ShapeMismatchNamesTensorAndBothShapes) {
  const Folder f;
  test::edit_safetensors_header(f.file("model.safetensors"), [](json& h) {
    h["model.layers.0.self_attn.q_proj.weight"]["shape"] = {64, 32};
  });
  EXPECT_THAT(f.error(), AllOf(HasSubstr("'model.layers.0.self_attn.q_proj.weight'"),
                               HasSubstr("has shape [64, 32], expected [64, 64]")));
}

TEST(SafetensorsLoader, DataOffsetsOutsideTheFileOrDisagreeingWithTheShape) {
  const Folder f;
  const std::string st = f.file("model.safetensors");
  test::edit_safetensors_header(st, [](json& h) {
    h["model.norm.weight"]["data_offsets"] = {0, std::uint64_t{1} << 40};
  });
  EXPECT_THAT(f.error(), AllOf(HasSubstr("'model.norm.weight'"), HasSubstr("past the"),
                               HasSubstr("the file is truncated, or its "
                                         "header is wrong")));
  // Reversed: a range that ends before it begins is named as that, not as outside the data.
  const Folder r;
  test::edit_safetensors_header(r.file("model.safetensors"), [](json& h) {
    h["model.norm.weight"]["data_offsets"] = {8, 4};
  });
  EXPECT_THAT(r.error(), AllOf(HasSubstr("'model.norm.weight'"),
                               HasSubstr("data_offsets [8, 4], which end before they begin")));
  // A file cut short: its last tensor's range now runs past the data, and the message says so.
  const Folder t;
  const std::string cut = t.file("model.safetensors");
  const std::string whole = test::read_bytes(cut);
  test::write_bytes(cut, whole.substr(0, whole.size() - 100));
  EXPECT_THAT(t.error(), HasSubstr("the file is truncated, or its header is wrong"));
  // The same bytes declared F16: the range is twice what the shape needs. (Shrinking the range
  // instead would leave a gap, which the data-region check reports first.)
  const Folder g;
  rewrite_tensors(g.file("model.safetensors"),
                  [](RawTensors& t) { t["model.norm.weight"].entry["dtype"] = "F16"; });
  EXPECT_THAT(g.error(), AllOf(HasSubstr("spanning 256 bytes"), HasSubstr("F16 needs 128")));
}

TEST(SafetensorsLoader, HeaderLengthBeyondTheFileOrTheLimit) {
  const Folder f;
  const std::string st = f.file("model.safetensors");
  std::string bytes = test::read_bytes(st);
  const std::uint64_t too_long = bytes.size();
  std::memcpy(bytes.data(), &too_long, 8);
  test::write_bytes(st, bytes);
  EXPECT_THAT(f.error(), AllOf(HasSubstr(fmt::format("declares a {}-byte JSON header", too_long)),
                               HasSubstr("follow the length field")));
  const std::uint64_t absurd = std::uint64_t{1} << 62;
  std::memcpy(bytes.data(), &absurd, 8);
  test::write_bytes(st, bytes);
  EXPECT_THAT(f.error(), HasSubstr("limit"));
  test::write_bytes(st, "abc");
  EXPECT_THAT(f.error(), HasSubstr("too short for the 8-byte header length"));
}

TEST(SafetensorsLoader, InvalidJsonIsReportedWithTheFile) {
  const Folder f;
  std::string bytes = test::read_bytes(f.file("model.safetensors"));
  bytes[8] = '[';  // the header object now opens as an array that never closes properly
  test::write_bytes(f.file("model.safetensors"), bytes);
  EXPECT_THAT(f.error(), AllOf(HasSubstr("model.safetensors"), HasSubstr("not valid JSON")));
  test::write_bytes(f.file("config.json"), "{\"hidden_size\": 64,");
  EXPECT_THAT(f.error(), AllOf(HasSubstr("config.json"), HasSubstr("not valid JSON")));
}

// Found by fuzz_safetensors: nlohmann::json reports a number it cannot hold as out_of_range, not
// parse_error, and that once escaped the loader as an internal error.
TEST(SafetensorsLoader, NumbersJsonCannotHoldAreInvalidJson) {
  const Folder f;
  test::write_bytes(f.file("config.json"), "{\"hidden_size\": 1e400}");
  EXPECT_THAT(f.error(), AllOf(HasSubstr("config.json"), HasSubstr("not valid JSON"),
                               HasSubstr("number overflow")));
  const Folder g;
  const std::string header = "{\"x\": 1e400}";
  const std::uint64_t n = header.size();
  test::write_bytes(g.file("model.safetensors"),
                    std::string(reinterpret_cast<const char*>(&n), 8) + header);
  EXPECT_THAT(g.error(), AllOf(HasSubstr("model.safetensors"), HasSubstr("not valid JSON")));
}

TEST(SafetensorsLoader, MissingFilesAreNamed) {
  const Folder f;
  std::filesystem::remove(f.file("model.safetensors"));
  EXPECT_THAT(f.error(), HasSubstr("neither model.safetensors nor model.safetensors.index.json"));
  std::filesystem::remove(f.file("config.json"));
  EXPECT_THAT(f.error(), AllOf(HasSubstr("tiny-llama"), HasSubstr("no readable config.json")));
}

TEST(SafetensorsLoader, UnsupportedOrInvalidConfigsAreNamed) {
  const Folder f;
  test::edit_json_file(f.file("config.json"), [](json& j) { j["model_type"] = "gemma"; });
  EXPECT_THAT(f.error(),
              AllOf(HasSubstr("model_type 'gemma'"), HasSubstr("llama, mistral, qwen2")));
  test::edit_json_file(f.file("config.json"), [](json& j) {
    j["model_type"] = "llama";
    j["num_key_value_heads"] = 3;
  });
  EXPECT_THAT(f.error(), HasSubstr("n_heads (4) must be divisible by n_kv_heads (3)"));
  test::edit_json_file(f.file("config.json"), [](json& j) { j.erase("hidden_size"); });
  EXPECT_THAT(f.error(), HasSubstr("missing required key \"hidden_size\""));
}

// The safetensors format requires the tensors' byte ranges to tile the data region exactly. A
// header whose ranges overlap, skip bytes or stop short of the end does not describe its data.
TEST(SafetensorsLoader, OverlappingTensorsAreRejected) {
  const Folder f;
  test::edit_safetensors_header(f.file("model.safetensors"), [](json& h) {
    for (auto& [name, e] : h.items()) {  // every tensor at byte 0, as in a corrupt header
      if (name == "__metadata__") continue;
      const auto size =
          e["data_offsets"][1].get<std::uint64_t>() - e["data_offsets"][0].get<std::uint64_t>();
      e["data_offsets"] = {0, size};
    }
  });
  EXPECT_THAT(f.error(), AllOf(HasSubstr("model.safetensors"), HasSubstr("data_offsets [0, "),
                               HasSubstr("overlap; expected each byte")));
}

TEST(SafetensorsLoader, BytesNoTensorOwnsAreRejected) {
  const Folder f;
  // A dropped header entry leaves its bytes between two other tensors.
  test::edit_safetensors_header(f.file("model.safetensors"),
                                [](json& h) { h.erase("model.layers.1.mlp.up_proj.weight"); });
  EXPECT_THAT(f.error(), AllOf(HasSubstr("of the data region belong to no tensor"),
                               HasSubstr("'model.norm.weight'"), HasSubstr("without gaps")));

  const Folder g;
  test::write_bytes(g.file("model.safetensors"),
                    test::read_bytes(g.file("model.safetensors")) + std::string(64, '\0'));
  EXPECT_THAT(g.error(), AllOf(HasSubstr("has 64 bytes after the last tensor's data"),
                               HasSubstr("expected the file to end there")));

  const Folder sharded(hf_config(), DType::F32, 3);  // each shard is checked on its own
  const std::string shard = sharded.file("model-00002-of-00003.safetensors");
  test::write_bytes(shard, test::read_bytes(shard) + "abcd");
  EXPECT_THAT(sharded.error(), AllOf(HasSubstr("model-00002-of-00003.safetensors"),
                                     HasSubstr("has 4 bytes after the last tensor's data")));
}

// Weights that config.json does not describe mean the two disagree; loading only what the config
// asks for would silently run a different model.
TEST(SafetensorsLoader, TensorsTheModelDoesNotUseAreRejected) {
  const Folder f;
  rewrite_tensors(f.file("model.safetensors"), [](RawTensors& t) {
    t["model.layers.2.mlp.up_proj.weight"] = t["model.layers.1.mlp.up_proj.weight"];
  });
  EXPECT_THAT(f.error(), AllOf(HasSubstr("holds 1 tensor the model does not use: "
                                         "'model.layers.2.mlp.up_proj.weight'"),
                               HasSubstr("the 2-layer model config.json describes")));

  // Qwen2-style biases under a config without attention_bias would be dropped the same way.
  const Folder g;
  rewrite_tensors(g.file("model.safetensors"), [](RawTensors& t) {
    t["model.layers.0.self_attn.q_proj.bias"] = t["model.layers.0.input_layernorm.weight"];
  });
  EXPECT_THAT(g.error(), HasSubstr("'model.layers.0.self_attn.q_proj.bias'"));

  const Folder h;  // many: the first five by name, then a count
  rewrite_tensors(h.file("model.safetensors"), [](RawTensors& t) {
    for (int i = 0; i < 7; ++i) t[fmt::format("extra.{}", i)] = t["model.norm.weight"];
  });
  EXPECT_THAT(h.error(), AllOf(HasSubstr("holds 7 tensors the model does not use"),
                               HasSubstr("'extra.0', 'extra.1', 'extra.2', 'extra.3', 'extra.4' "
                                         "and 2 more")));
}

TEST(SafetensorsLoader, BuffersRealCheckpointsCarryAreIgnored) {
  const RawTensor inv_freq{{{"dtype", "F32"}, {"shape", {8}}}, std::string(32, '\0')};
  const Folder f;  // tied, so an lm_head.weight is the shared matrix stored twice
  rewrite_tensors(f.file("model.safetensors"), [&](RawTensors& t) {
    t["model.rotary_emb.inv_freq"] = inv_freq;
    for (int l = 0; l < 2; ++l)
      t[fmt::format("model.layers.{}.self_attn.rotary_emb.inv_freq", l)] = inv_freq;
    t["lm_head.weight"] = t["model.embed_tokens.weight"];
  });
  test::expect_same_tensors(load_safetensors(f.dir), f.weights);

  // The allow-list is per layer: the buffer of a layer config.json does not have is an error.
  rewrite_tensors(f.file("model.safetensors"), [&](RawTensors& t) {
    t["model.layers.2.self_attn.rotary_emb.inv_freq"] = inv_freq;
  });
  EXPECT_THAT(f.error(), HasSubstr("'model.layers.2.self_attn.rotary_emb.inv_freq'"));
}

// A directory, FIFO or device where a file belongs is named as such, and a FIFO is never opened
// for a blocking read (which would wait forever for a writer).
TEST(SafetensorsLoader, PathsThatAreNotRegularFilesAreNamed) {
  namespace fs = std::filesystem;
  const Folder f;
  const std::string config = f.file("config.json");
  fs::remove(config);
  fs::create_directory(config);
  EXPECT_THAT(f.error(), AllOf(HasSubstr("model config '" + config +
                                         "' is a directory, not a "
                                         "regular file"),
                               HasSubstr("expected a Hugging Face config.json")));
  fs::remove(config);
  ASSERT_EQ(::mkfifo(config.c_str(), 0600), 0);
  EXPECT_THAT(f.error(), HasSubstr("is a FIFO (named pipe), not a regular file"));

  const Folder g;
  fs::remove(g.file("model.safetensors"));
  ASSERT_EQ(::mkfifo(g.file("model.safetensors").c_str(), 0600), 0);
  EXPECT_THAT(g.error(), AllOf(HasSubstr("model.safetensors' is a FIFO (named pipe)"),
                               HasSubstr("not a regular file")));
  fs::remove(g.file("model.safetensors"));
  fs::create_directory(g.file("model.safetensors"));
  EXPECT_THAT(g.error(), HasSubstr("model.safetensors' is a directory, not a regular file"));

  const Folder sharded(hf_config(), DType::F32, 3);
  const std::string index = sharded.file("model.safetensors.index.json");
  fs::remove(index);
  fs::create_directory(index);
  EXPECT_THAT(sharded.error(), AllOf(HasSubstr("shard index '" + index + "' is a directory"),
                                     HasSubstr("expected a model.safetensors.index.json")));
}

// Sliding-window attention sees only the last `sliding_window` keys; kvheap attends to all of
// them, so a smaller window than the context would be a silent wrong answer.
TEST(SafetensorsLoader, SlidingWindowSmallerThanTheContextIsRejected) {
  const Folder f;
  const std::string config = f.file("config.json");
  test::edit_json_file(config, [](json& j) {
    j["model_type"] = "mistral";
    j["sliding_window"] = 4;
  });
  EXPECT_THAT(
      f.error(),
      AllOf(HasSubstr("\"sliding_window\" = 4 is smaller than max_position_embeddings "
                      "(96)"),
            HasSubstr("not supported"), HasSubstr("expected null or a window of at least 96")));
  // A window covering the whole context is full attention, and null means no window.
  for (const json& window : {json(96), json(std::uint64_t{1} << 40), json(nullptr)}) {
    test::edit_json_file(config, [&](json& j) { j["sliding_window"] = window; });
    EXPECT_NO_THROW((void)load_safetensors(f.dir)) << window.dump();
  }
  // Qwen2 configs carry a window that applies only with "use_sliding_window": true.
  test::edit_json_file(config, [](json& j) {
    j["sliding_window"] = 4;
    j["use_sliding_window"] = false;
  });
  EXPECT_NO_THROW((void)load_safetensors(f.dir));
  test::edit_json_file(config, [](json& j) { j["use_sliding_window"] = true; });
  EXPECT_THAT(f.error(), HasSubstr("\"sliding_window\" = 4"));
  // For Qwen2 an absent "use_sliding_window" means false, as in its reference implementation;
  // for Mistral the window applies whenever it is set (above).
  test::edit_json_file(config, [](json& j) {
    j["model_type"] = "qwen2";
    j["attention_bias"] = false;  // this folder's tensors have no biases
    j.erase("use_sliding_window");
  });
  EXPECT_NO_THROW((void)load_safetensors(f.dir));
}

// config.json holds doubles; kvheap's config holds floats. A value beyond float's range once ran
// as inf, and one below it was reported as "got 0".
TEST(SafetensorsLoader, FloatsOutsideFloatRangeAreReportedAsWritten) {
  const Folder f;
  const std::string config = f.file("config.json");
  test::edit_json_file(config, [](json& j) { j["rope_theta"] = 1e39; });
  EXPECT_THAT(f.error(), HasSubstr("\"rope_theta\" = 1e+39 is too large for a 32-bit float"));
  test::edit_json_file(config, [](json& j) {
    j["rope_theta"] = 10000.0;
    j["rms_norm_eps"] = 1e-50;
  });
  EXPECT_THAT(f.error(), HasSubstr("\"rms_norm_eps\" = 1e-50 underflows to 0 in a 32-bit float"));
  test::edit_json_file(config, [](json& j) {
    j["rms_norm_eps"] = 1e-5;
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 1e39},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8}};
  });
  EXPECT_THAT(f.error(), AllOf(HasSubstr("rope_scaling"),
                               HasSubstr("\"factor\" = 1e+39 is too large for a 32-bit float")));
}

// ---- Qwen3 --------------------------------------------------------------------------------------

TEST(SafetensorsLoader, Qwen3NormsAreLoadedWithHeadsWiderThanTheStream) {
  const Folder f(test::tiny_qwen3_config());
  EXPECT_NE(test::read_bytes(f.file("config.json")).find("\"model_type\": \"qwen3\""),
            std::string::npos);
  const ModelWeights got = load_safetensors(f.dir);
  const ModelConfig& c = got.config;
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);  // Qwen3's default, unlike Qwen2's
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_dim(), 2 * c.dim);
  EXPECT_EQ(c.rope_theta, 1000000.0f);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  ASSERT_NE(got.layers[1].q_norm, nullptr);
  ASSERT_NE(got.layers[1].k_norm, nullptr);
  test::expect_same_tensors(got, f.weights);  // q_norm/k_norm included, bit for bit
  // As for Qwen2, a window applies only with "use_sliding_window": true, which is off when absent.
  test::edit_json_file(f.file("config.json"), [](json& j) { j["sliding_window"] = 4; });
  EXPECT_NO_THROW((void)load_safetensors(f.dir));
  test::edit_json_file(f.file("config.json"), [](json& j) { j["use_sliding_window"] = true; });
  EXPECT_THAT(f.error(), HasSubstr("\"sliding_window\" = 4"));
}

// transformers' Qwen3Config defaults head_dim to 128, not hidden_size / num_attention_heads.
TEST(SafetensorsLoader, Qwen3HeadDimDefaultsTo128) {
  ModelConfig c = test::tiny_qwen3_config();
  c.head_dim = 128;
  const Folder f(c);
  test::edit_json_file(f.file("config.json"), [](json& j) { j.erase("head_dim"); });
  EXPECT_EQ(load_safetensors(f.dir).config.head_dim, 128);
  // For Llama the default is 64 / 4 = 16, which these tensors do not have.
  test::edit_json_file(f.file("config.json"), [](json& j) { j["model_type"] = "llama"; });
  EXPECT_THAT(f.error(), HasSubstr("'model.layers.0.self_attn.q_proj.weight'"));
}

TEST(SafetensorsLoader, Qwen3MissingOrMisshapenNormIsNamedWithItsShape) {
  const Folder f(test::tiny_qwen3_config());
  const std::string st = f.file("model.safetensors");
  const std::string all = test::read_bytes(st);
  rewrite_tensors(st, [](RawTensors& t) { t.erase("model.layers.1.self_attn.k_norm.weight"); });
  EXPECT_THAT(f.error(),
              AllOf(HasSubstr("missing tensor 'model.layers.1.self_attn.k_norm.weight' (expected "
                              "shape [32]; model_type qwen3 normalises every head of q and k"),
                    HasSubstr("head_dim = 32 values")));

  // A gain per q_dim value instead of per head dimension: the shape names both.
  test::write_bytes(st, all);
  rewrite_tensors(st, [](RawTensors& t) {
    t["model.layers.0.self_attn.q_norm.weight"] = t["model.layers.0.input_layernorm.weight"];
  });
  EXPECT_THAT(f.error(), AllOf(HasSubstr("tensor 'model.layers.0.self_attn.q_norm.weight'"),
                               HasSubstr("has shape [64], expected [32] (model_type qwen3")));

  // A Llama folder relabelled as Qwen3 lacks every norm; the first is named.
  const Folder llama;
  test::edit_json_file(llama.file("config.json"), [](json& j) { j["model_type"] = "qwen3"; });
  EXPECT_THAT(llama.error(), HasSubstr("missing tensor 'model.layers.0.self_attn.q_norm.weight' "
                                       "(expected shape [16]"));

  // Sharded: the index does not list it.
  const Folder sharded(test::tiny_qwen3_config(), DType::F32, 3);
  test::edit_json_file(sharded.file("model.safetensors.index.json"), [](json& j) {
    j["weight_map"].erase("model.layers.0.self_attn.q_norm.weight");
  });
  EXPECT_THAT(sharded.error(),
              AllOf(HasSubstr("missing tensor 'model.layers.0.self_attn.q_norm.weight' (expected "
                              "shape [32]"),
                    HasSubstr("not listed in the weight_map")));
}

// The norms in a folder whose config.json is not Qwen3 would be dropped, and the model run
// without them: rejected like any tensor the model does not use.
TEST(SafetensorsLoader, QkNormsUnderAnotherModelTypeAreRejectedNotDropped) {
  const Folder f(test::tiny_qwen3_config());
  test::edit_json_file(f.file("config.json"), [](json& j) {
    j["model_type"] = "qwen2";
    j["attention_bias"] = false;
  });
  EXPECT_THAT(f.error(), AllOf(HasSubstr("holds 4 tensors the model does not use"),
                               HasSubstr("'model.layers.0.self_attn.k_norm.weight'")));
}

// ---- Stop tokens --------------------------------------------------------------------------------

TEST(SafetensorsLoader, GenerationConfigStopTokensWinOverConfigJson) {
  const Folder f;  // config.json: "eos_token_id": 2
  EXPECT_EQ(load_hf_stop_ids(f.dir), std::vector<int>{2});
  const std::string gen = f.file("generation_config.json");
  // As Qwen3-0.6B ships them: config.json names one id, generation_config.json a list.
  test::write_bytes(gen, R"({"bos_token_id": 1, "eos_token_id": [5, 2], "temperature": 0.6})");
  EXPECT_EQ(load_hf_stop_ids(f.dir), (std::vector<int>{5, 2}));
  EXPECT_EQ(load_safetensors(f.dir).config.stop_ids, (std::vector<int>{5, 2}));
  test::write_bytes(gen, R"({"eos_token_id": 7})");
  EXPECT_EQ(load_hf_stop_ids(f.dir), std::vector<int>{7});
  // A generation_config.json that sets no stop token leaves config.json's.
  for (const char* text : {R"({"temperature": 0.6})", R"({"eos_token_id": null})"}) {
    test::write_bytes(gen, text);
    EXPECT_EQ(load_hf_stop_ids(f.dir), std::vector<int>{2}) << text;
  }
  // config.json's list, when there is no generation_config.json.
  std::filesystem::remove(gen);
  test::edit_json_file(f.file("config.json"), [](json& j) { j["eos_token_id"] = {3, 4}; });
  EXPECT_EQ(load_hf_stop_ids(f.dir), (std::vector<int>{3, 4}));
}

TEST(SafetensorsLoader, BadGenerationConfigIsNamed) {
  const Folder f;
  const std::string gen = f.file("generation_config.json");
  test::write_bytes(gen, R"({"eos_token_id": [5, )");
  EXPECT_THAT(f.error(), AllOf(HasSubstr(gen), HasSubstr("not valid JSON")));
  test::write_bytes(gen, "[1, 2]");
  EXPECT_THAT(f.error(), HasSubstr("must hold a JSON object, got array"));
  test::write_bytes(gen, R"({"eos_token_id": [5, 128]})");  // the tiny vocabulary is 0..127
  EXPECT_THAT(f.error(), AllOf(HasSubstr(gen), HasSubstr("\"eos_token_id\" 128 is not a token of "
                                                         "the model: config.json's vocab_size is "
                                                         "128 (ids 0..127)")));
  test::write_bytes(gen, R"({"eos_token_id": []})");
  EXPECT_THAT(f.error(), HasSubstr("\"eos_token_id\" is an empty list"));
  test::write_bytes(gen, R"({"eos_token_id": "</s>"})");
  EXPECT_THAT(f.error(), HasSubstr("\"eos_token_id\" must be an integer"));
  std::filesystem::remove(gen);
  std::filesystem::create_directory(gen);
  EXPECT_THAT(f.error(), AllOf(HasSubstr("generation config '" + gen + "' is a directory"),
                               HasSubstr("expected a Hugging Face generation_config.json")));
}

// ---- rope_parameters (transformers 5) -----------------------------------------------------------

TEST(SafetensorsLoader, RopeParametersOfNewerConfigsAreRead) {
  const Folder f(test::tiny_qwen3_config());
  const std::string config = f.file("config.json");
  // The top-level rope_theta gone: falling back to 10000 would silently run another model.
  test::edit_json_file(config, [](json& j) {
    j.erase("rope_theta");
    j.erase("rope_scaling");
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  });
  EXPECT_EQ(load_safetensors(f.dir).config.rope_theta, 500000.0f);
  test::edit_json_file(config, [](json& j) {
    j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                            {"factor", 32.0},          {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  });
  const ModelConfig c = load_safetensors(f.dir).config;
  EXPECT_TRUE(c.rope_scaling.enabled);
  EXPECT_EQ(c.rope_scaling.factor, 32.0f);

  test::edit_json_file(config, [](json& j) {
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
    j["rope_theta"] = 10000.0;
  });
  EXPECT_THAT(f.error(), HasSubstr("\"rope_theta\" = 10000 disagrees with \"rope_parameters\" "
                                   "rope_theta = 500000"));
  test::edit_json_file(config, [](json& j) {
    j.erase("rope_theta");
    j["rope_parameters"]["partial_rotary_factor"] = 0.5;
  });
  EXPECT_THAT(f.error(), HasSubstr("\"partial_rotary_factor\" = 0.5 is not supported"));
  test::edit_json_file(config, [](json& j) {  // one RoPE per layer type
    j["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e6}}},
                            {"sliding_attention", {{"rope_theta", 1e4}}}};
  });
  EXPECT_THAT(f.error(), HasSubstr("\"rope_parameters\" must be an object with a \"rope_theta\""));
  test::edit_json_file(config, [](json& j) {
    j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}};
  });
  EXPECT_THAT(f.error(), HasSubstr("unsupported rope_parameters type 'yarn'"));
}

}  // namespace
}  // namespace kvheap
