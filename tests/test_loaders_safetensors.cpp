// Tests for the Hugging Face loader: round trips in every dtype, single-file and sharded, the
// config.json features kvheap honours (tied classifier, Qwen2 biases, llama3 RoPE scaling), and a
// named, actionable error for each way a folder can be malformed.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <tuple>

#include "common/error.hpp"
#include "common/safetensors_loader.hpp"
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
  test::edit_safetensors_header(f.file("model.safetensors"), [](json& h) {
    h["model.layers.0.self_attn.o_proj.bias"] = h["model.norm.weight"];  // any [dim] F32 bytes
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
    for (const char* k : {"num_key_value_heads", "head_dim", "rope_theta", "tie_word_embeddings",
                          "rope_scaling", "model_type"})
      j.erase(k);
    j["eos_token_id"] = {2, 5};
  });
  test::edit_safetensors_header(f.file("model.safetensors"), [](json& h) {  // kv heads now = 4
    for (int l = 0; l < 2; ++l)
      for (const char* p : {"k_proj", "v_proj"})
        h[fmt::format("model.layers.{}.self_attn.{}.weight", l, p)] =
            h[fmt::format("model.layers.{}.self_attn.q_proj.weight", l)];
    h["lm_head.weight"] = h["model.embed_tokens.weight"];  // untied by default
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
  test::edit_safetensors_header(f.file("model.safetensors"),
                                [](json& h) { h.erase("model.layers.1.mlp.up_proj.weight"); });
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
  EXPECT_THAT(f.error(), AllOf(HasSubstr("'model.norm.weight'"), HasSubstr("outside the")));
  test::edit_safetensors_header(st, [](json& h) {
    h["model.norm.weight"]["data_offsets"] = {0, 8};
  });
  EXPECT_THAT(f.error(), AllOf(HasSubstr("spanning 8 bytes"), HasSubstr("needs 256")));
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

}  // namespace
}  // namespace kvheap
