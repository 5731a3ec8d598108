// Tests for ModelConfig: presets, validation messages, and KV arithmetic against hand-computed
// values.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "base/error.hpp"
#include "common/model/model_config.hpp"

namespace kvheap {
namespace {

TEST(ModelConfig, EveryPresetValidates) {
  for (const auto& name : preset_names()) {
    SCOPED_TRACE(name);
    const ModelConfig c = preset(name);
    EXPECT_NO_THROW(c.validate());
    EXPECT_EQ(c.name, name);
  }
}

TEST(ModelConfig, UnknownPresetListsTheValidNames) {
  try {
    (void)preset("llama-9");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("llama-9"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("stories260k"), std::string::npos);
  }
}

TEST(ModelConfig, HeadsThatDoNotDivideAreRejected) {
  ModelConfig c = preset("tiny");
  c.n_kv_heads = 3;  // 4 query heads cannot share 3 KV heads evenly
  try {
    c.validate();
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("divisible"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, OddHeadDimAndNonPositiveSizesAreRejected) {
  ModelConfig c = preset("tiny");
  c.head_dim = 15;
  EXPECT_THROW(c.validate(), InputError);
  c = preset("tiny");
  c.n_layers = 0;
  EXPECT_THROW(c.validate(), InputError);
  c = preset("tiny");
  c.vocab_size = -512;
  EXPECT_THROW(c.validate(), InputError);
  c = preset("tiny");
  c.dim = 1 << 30;  // absurd sizes from a garbage header
  EXPECT_THROW(c.validate(), InputError);
}

// An infinite rope_theta or scaling factor would run and produce garbage; so would NaN anywhere.
TEST(ModelConfig, NonFiniteRopeAndNormValuesAreRejected) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto message = [](const ModelConfig& c) {
    try {
      c.validate();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "expected InputError";
    return std::string();
  };
  for (const float theta : {inf, nan}) {
    ModelConfig c = preset("tiny");
    c.rope_theta = theta;
    EXPECT_NE(message(c).find("rope_theta must be a finite positive number"), std::string::npos);
  }
  for (const float eps : {inf, nan}) {
    ModelConfig c = preset("tiny");
    c.norm_eps = eps;
    EXPECT_NE(message(c).find("norm_eps must be in (0, 1)"), std::string::npos);
  }
  ModelConfig c = preset("llama-3.2-1b");
  c.rope_scaling.factor = inf;
  EXPECT_NE(message(c).find("needs finite factors"), std::string::npos) << message(c);
  EXPECT_NE(message(c).find("got factor inf"), std::string::npos) << message(c);
  c = preset("llama-3.2-1b");
  c.rope_scaling.high_freq_factor = inf;
  EXPECT_NE(message(c).find("high_freq_factor inf"), std::string::npos) << message(c);
}

// Llama-3-8B: 32 layers x 8 KV heads x 128 dims x 2 (K,V) x 2 bytes = 131072 bytes = 128 KiB.
TEST(KvArithmetic, Llama3_8BBf16IsOneHundredTwentyEightKiBPerToken) {
  const ModelConfig c = preset("llama-3-8b");
  EXPECT_EQ(kv_bytes_per_token(c, DType::BF16), 131072u);
  // An 8192-token context: 128 KiB x 8192 = 1 GiB exactly.
  EXPECT_EQ(kv_bytes_for_context(c, DType::BF16, 8192), 1073741824u);
  // fp32 doubles it.
  EXPECT_EQ(kv_bytes_per_token(c, DType::F32), 262144u);
}

// Llama-3-70B: 80 x 8 x 128 x 2 x 2 = 327680 bytes = 320 KiB per token in bf16.
TEST(KvArithmetic, Llama3_70BBf16IsThreeHundredTwentyKiBPerToken) {
  EXPECT_EQ(kv_bytes_per_token(preset("llama-3-70b"), DType::BF16), 327680u);
}

// Qwen2.5-7B has only 4 KV heads: 28 x 4 x 128 x 2 x 2 = 57344 bytes per token in bf16.
TEST(KvArithmetic, Qwen25_7BBf16IsFiftySixKiBPerToken) {
  EXPECT_EQ(kv_bytes_per_token(preset("qwen2.5-7b"), DType::BF16), 57344u);
}

// Qwen3-0.6B: 28 x 8 x 128 x 2 x 2 = 114688 bytes = 112 KiB per token in bf16. Its heads are
// wider than hidden_size / n_heads (128 vs 64), so a head_dim derived from the width would halve
// it.
TEST(KvArithmetic, Qwen3_0_6BBf16IsOneHundredTwelveKiBPerToken) {
  const ModelConfig c = preset("qwen3-0.6b");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 2 * c.dim);
  EXPECT_EQ(kv_bytes_per_token(c, DType::BF16), 114688u);
  EXPECT_EQ(kv_bytes_for_context(c, DType::BF16, c.max_seq_len),
            std::size_t{114688} * 40960);  // 4.7 GB
}

// stories260K in fp32: 5 layers x 4 KV heads x 8 dims x 2 x 4 bytes = 1280 bytes per token.
TEST(KvArithmetic, Stories260KFp32IsOneThousandTwoHundredEightyBytesPerToken) {
  EXPECT_EQ(kv_bytes_per_token(preset("stories260k"), DType::F32), 1280u);
}

// Parameter counts against the published sizes: Llama-3-8B has 8.03B, Llama-3.2-1B has 1.24B
// (tied), stories260K has the 260K of its name (checked against the file size elsewhere).
TEST(ModelConfig, ParameterCountsMatchPublishedSizes) {
  EXPECT_EQ(preset("llama-3-8b").num_parameters(), 8030261248);
  EXPECT_EQ(preset("llama-3.2-1b").num_parameters(), 1235814400);
  EXPECT_EQ(preset("qwen2.5-7b").num_parameters(), 7615616512);
}

// Qwen3-0.6B's model card gives 0.44B parameters without the embedding. Its q/k norm gains add
// 2 x 128 per layer, and the table is shared with the classifier (tie_word_embeddings).
TEST(ModelConfig, Qwen3_0_6BCountsItsQkNormGainsAndOneTable) {
  ModelConfig c = preset("qwen3-0.6b");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.rope_style, RopeStyle::Halves);
  const std::int64_t embedding = std::int64_t{151936} * 1024;
  EXPECT_EQ(c.num_parameters(), 596049920);
  EXPECT_EQ(c.num_parameters() - embedding, 440467456);  // the card's 0.44B
  EXPECT_NE(describe(c).find("q/k norm"), std::string::npos) << describe(c);
  c.qk_norm = false;
  EXPECT_EQ(c.num_parameters(), 596049920 - 28 * 2 * 128);
}

TEST(ModelConfig, DtypeParsingNamesTheValidChoices) {
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_EQ(parse_dtype("fp16"), DType::F16);
  EXPECT_EQ(parse_dtype("fp32"), DType::F32);
  try {
    (void)parse_dtype("int4");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("fp32, fp16 or bf16"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvheap
