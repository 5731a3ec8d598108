// Tests of GGUF files: every tensor type dequantized bit for bit as the gguf package does it;
// SmolLM2-135M-Instruct's config, tokenizer and chat prompts against llama.cpp's
// (tests/data/gguf/, written by scripts/make_gguf_testdata.py); a SentencePiece vocabulary as a
// GGUF tokenizer against llama.cpp's; and every malformed file refused with the problem named.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "common/tokenizer/chat_format.hpp"
#include "common/model/gguf_file.hpp"
#include "common/model/gguf_loader.hpp"
#include "common/tokenizer/gguf_tokenizer.hpp"
#include "common/model/model_loader.hpp"
#include "common/model/rope_freqs.hpp"
#include "common/tokenizer/tokenizer_files.hpp"
#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/gguf_writer.hpp"
#include "tests/support/test_support.hpp"
#include "tests/support/source_tree.hpp"

namespace kvheap {
namespace {

constexpr const char* kSmolLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string gguf_data(const std::string& name) {
  return (test::source_dir() / "tests" / "data" / "gguf" / name).string();
}

const nlohmann::json& oracle() {
  static const nlohmann::json j =
      nlohmann::json::parse(test::read_bytes(gguf_data("smollm2.json")));
  return j;
}

/// The InputError of parsing `bytes` as a GGUF file, or "" (and a test failure) when it parses.
std::string parse_error(const std::string& bytes) {
  return test::input_error_of(
      [&] { return GgufFile(std::as_bytes(std::span(bytes.data(), bytes.size())), "T"); });
}

/// How many of the oracle's `cases` `tok` encodes (with BOS as the vocabulary says) to their ids.
int cases_equal(const Tokenizer& tok, const nlohmann::json& cases) {
  int equal = 0;
  for (const nlohmann::json& c : cases) {
    const std::vector<int> ids = tok.encode(c.at("text").get<std::string>(), true);
    EXPECT_EQ(ids, c.at("ids").get<std::vector<int>>()) << c.at("name");
    equal += ids == c.at("ids").get<std::vector<int>>();
  }
  return equal;
}

void expect_mentions(const std::string& message, std::initializer_list<const char*> words) {
  for (const char* w : words)
    EXPECT_NE(message.find(w), std::string::npos) << w << " in: " << message;
}

TEST(Gguf, EveryTensorTypeDequantizesBitForBitAsTheReference) {
  const GgufFile f(gguf_data("quants.gguf"));
  int compared = 0;
  for (const char* name :
       {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"}) {
    SCOPED_TRACE(name);
    const GgufTensor* q = f.tensor(std::string("q.") + name);
    const GgufTensor* want = f.tensor(std::string("f.") + name);
    ASSERT_NE(q, nullptr);
    ASSERT_NE(want, nullptr);
    EXPECT_EQ(ggml_type_name(q->type), name);
    ASSERT_EQ(q->elements(), want->elements());
    std::vector<float> got(q->elements());
    dequantize(static_cast<GgmlType>(q->type), q->data, got.data(), got.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      differ += std::memcmp(&got[i], want->data + 4 * i, 4) != 0;
    EXPECT_EQ(differ, 0u) << "of " << got.size() << " values";
    ++compared;
  }
  EXPECT_EQ(compared, 11);
}

TEST(Gguf, TheRealModelsConfigIsRead) {
  KVHEAP_REQUIRE_MODEL(path, kSmolLM2);
  const GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 272u);
  const ModelConfig c = gguf_config(f);
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.dim, 576);
  EXPECT_EQ(c.hidden_dim, 1536);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_seq_len, 8192);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::Interleaved);  // llama.cpp's converter reorders llama's q/k
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.stop_ids, std::vector<int>{2});  // <|im_end|>
  EXPECT_EQ(kv_bytes_per_token(c, DType::F32), 46080u);
  EXPECT_EQ(kv_bytes_per_token(c, DType::BF16), 23040u);
}

TEST(Gguf, TheRealTokenizerGivesLlamaCppsIds) {
  KVHEAP_REQUIRE_MODEL(path, kSmolLM2);
  EXPECT_EQ(cases_equal(*load_tokenizer_file(path, 49152), oracle().at("tokenizer")), 31);
}

// The file's chat template, rendered by Jinja, is ChatML with a default system message: kvheap
// recognises it without interpreting it and writes the same text, hence the same ids.
TEST(Gguf, ChatPromptsAreTheTemplatesRendering) {
  KVHEAP_REQUIRE_MODEL(path, kSmolLM2);
  const std::unique_ptr<Tokenizer> tok = load_tokenizer_file(path, 49152);
  const ChatSetup setup = detect_chat_setup(path, *tok);
  EXPECT_EQ(setup.format, ChatFormat::ChatML);
  EXPECT_EQ(setup.default_system,
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(chat_end_of_turn(setup.format, *tok), 2);
  int equal = 0;
  for (const nlohmann::json& c : oracle().at("chat")) {
    const std::string text =
        chat_prompt(setup.format, setup.default_system, c.at("message").get<std::string>());
    EXPECT_EQ(text, c.at("text").get<std::string>());
    EXPECT_EQ(tok->encode(text, false), c.at("ids").get<std::vector<int>>());
    equal += text == c.at("text").get<std::string>();
  }
  EXPECT_EQ(equal, 5);
}

TEST(Gguf, AFetchedModelIsFoundByNameOrTheFetchCommandNamed) {
  KVHEAP_REQUIRE_MODEL(path, kSmolLM2);
  EXPECT_EQ(resolve_model_name("smollm2"), path);  // KVHEAP_MODELS_DIR holds it
  EXPECT_EQ(resolve_model_name("tiny"), "tiny");
  const test::TempDir tmp;
  const test::ScopedEnv models("KVHEAP_MODELS_DIR", tmp.file("models"));
  const test::ScopedEnv cache("XDG_CACHE_HOME", tmp.file("cache"));
  expect_mentions(test::input_error_of([] { return resolve_model_name("smollm2"); }),
                  {"SmolLM2-135M-Instruct.Q4_1.gguf is not in", "/models' nor '",
                   "/cache/kvheap/models'", "scripts/fetch-model.sh smollm2"});
}

TEST(Gguf, ChatTemplatesAreRecognisedOrRefused) {
  const auto format = [](std::string_view t) { return chat_setup_of_template(t)->format; };
  EXPECT_EQ(format("{{'<|start_header_id|>' + role + '<|end_header_id|>'}}{{'<|eot_id|>'}}"),
            ChatFormat::Llama3);
  EXPECT_EQ(format("{{ '[INST] ' + content + ' [/INST]' }}"), ChatFormat::Mistral);
  EXPECT_EQ(format("<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
                   "helpful assistant.<|im_end|>"),
            ChatFormat::Qwen2);
  EXPECT_EQ(format("{{'<|im_start|>' + role}}<think>{{'<|im_end|>'}}"), ChatFormat::Qwen3);
  // A default system message written with Jinja's \n escape; one built from the messages is none.
  const auto escaped = chat_setup_of_template("{{ '<|im_start|>system\\nBe kind.<|im_end|>\\n' }}");
  EXPECT_EQ(escaped->format, ChatFormat::ChatML);
  EXPECT_EQ(escaped->default_system, "Be kind.");
  EXPECT_EQ(chat_setup_of_template("{{'<|im_start|>system\n' + messages[0]['content'] + "
                                   "'<|im_end|>'}}")
                ->default_system,
            "");
  EXPECT_FALSE(chat_setup_of_template("{{ bos_token }}{{ '<start_of_turn>user' }}"));
}

// Llama 2's SentencePiece vocabulary (llama2.c's tokenizer.bin) as a GGUF tokenizer of model
// `llama`, built with the rules scripts/make_gguf_testdata.py uses for llama.cpp's copy.
std::string spm_vocab_gguf(const std::string& tokenizer_bin, const test::TempDir& tmp) {
  const std::string bin = test::read_bytes(tokenizer_bin);
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<std::int32_t> types;
  for (std::size_t pos = 4; pos + 8 <= bin.size();) {
    float score = 0;
    std::int32_t n = 0;
    std::memcpy(&score, bin.data() + pos, 4);
    std::memcpy(&n, bin.data() + pos + 4, 4);
    std::string piece = bin.substr(pos + 8, static_cast<std::size_t>(n));
    pos += 8 + static_cast<std::size_t>(n);
    std::int32_t type = 1;
    const std::size_t id = tokens.size();
    if (id == 0) {
      piece = "<unk>", type = 2;
    } else if (id == 1 || id == 2) {
      piece = id == 1 ? "<s>" : "</s>", type = 3;
    } else if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece.back() == '>') {
      type = 6;
    } else {
      for (std::size_t at = piece.find(' '); at != std::string::npos; at = piece.find(' ', at))
        piece.replace(at, 1, "\u2581");
    }
    tokens.push_back(piece);
    scores.push_back(score);
    types.push_back(type);
  }
  test::GgufWriter w;
  w.string("general.architecture", "llama");
  w.string("tokenizer.ggml.model", "llama");
  w.strings("tokenizer.ggml.tokens", tokens);
  w.f32s("tokenizer.ggml.scores", scores);
  w.i32s("tokenizer.ggml.token_type", types);
  w.u32("tokenizer.ggml.bos_token_id", 1);
  w.u32("tokenizer.ggml.eos_token_id", 2);
  w.u32("tokenizer.ggml.unknown_token_id", 0);
  const std::string path = tmp.file("llama2-vocab.gguf");
  test::write_bytes(path, w.bytes());
  return path;
}

TEST(Gguf, ASentencePieceVocabularyGivesLlamaCppsIds) {
  KVHEAP_REQUIRE_MODEL(bin, "tokenizer.bin");
  const test::TempDir tmp;
  EXPECT_EQ(cases_equal(*load_tokenizer_file(spm_vocab_gguf(bin, tmp), 32000),
                        oracle().at("spm_tokenizer")),
            31);
}

TEST(Gguf, ATinyModelLoadsAndEveryPrefixOfItIsRefused) {
  const std::string bytes = test::tiny_model_gguf().bytes();
  const test::TempDir tmp;
  const std::string path = tmp.file("tiny.gguf");
  test::write_bytes(path, bytes);
  const ModelWeights w = load_model(path);
  EXPECT_EQ(w.config.dim, 8);
  EXPECT_EQ(w.config.vocab_size, 8);
  EXPECT_EQ(w.classifier, w.token_embedding);
  EXPECT_EQ(w.layers[0].wk[5], static_cast<float>((5 * 7 % 13) - 6) / 16.0f);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::string e = parse_error(bytes.substr(0, n));
    if (e.find("truncated") == std::string::npos) {
      ADD_FAILURE() << "a prefix of " << n << " bytes: " << e;
      break;
    }
  }
}

// Qwen2's biases and Qwen3's q/k norms are read, both rotate halves; a llama file's
// rope_freqs.weight (Llama 3.1's scaling) divides RoPE's inverse frequencies.
TEST(Gguf, QwenFilesAndRopeFactorsAreRead) {
  const test::TempDir tmp;
  const auto load = [&](test::GgufWriter w, const std::string& name) {
    test::write_bytes(tmp.file(name), w.bytes());
    return load_model(tmp.file(name));
  };
  const ModelWeights qwen2 = load(test::tiny_model_gguf("qwen2"), "qwen2.gguf");
  EXPECT_TRUE(qwen2.config.attention_bias);
  EXPECT_FALSE(qwen2.config.qk_norm);
  EXPECT_EQ(qwen2.config.rope_style, RopeStyle::Halves);
  ASSERT_NE(qwen2.layers[0].bk, nullptr);
  EXPECT_EQ(qwen2.layers[0].bk[3], 2.0f / 16.0f);  // the writer's value 3: 3 * 7 % 13 - 6 = 2
  const ModelWeights qwen3 = load(test::tiny_model_gguf("qwen3"), "qwen3.gguf");
  EXPECT_TRUE(qwen3.config.qk_norm);
  EXPECT_FALSE(qwen3.config.attention_bias);
  EXPECT_EQ(qwen3.config.rope_style, RopeStyle::Halves);
  EXPECT_NE(qwen3.layers[0].k_norm, nullptr);
  // A qwen3 file without its norms is missing a tensor, named with its shape.
  test::GgufWriter no_norms = test::tiny_model_gguf("qwen3");
  no_norms.drop_tensor("blk.0.attn_k_norm.weight");
  expect_mentions(test::input_error_of([&] { return load(no_norms, "no_norms.gguf"); }),
                  {"has no tensor 'blk.0.attn_k_norm.weight'", "[4]"});
  const ModelWeights llama = load(test::tiny_model_gguf(), "llama.gguf");
  EXPECT_EQ(llama.config.rope_style, RopeStyle::Interleaved);
  EXPECT_TRUE(llama.config.rope_freq_factors.empty());
  test::GgufWriter scaled = test::tiny_model_gguf();
  scaled.tensor("rope_freqs.weight", {2}, 0, test::le_bytes(1.0f) + test::le_bytes(4.0f));
  const ModelWeights l31 = load(scaled, "scaled.gguf");
  EXPECT_EQ(l31.config.rope_freq_factors, (std::vector<float>{1.0f, 4.0f}));
  const std::vector<float> plain = rope_inv_freq(llama.config);
  const std::vector<float> divided = rope_inv_freq(l31.config);
  EXPECT_EQ(divided[0], plain[0]);
  EXPECT_EQ(divided[1], plain[1] / 4.0f);
  test::GgufWriter zero = test::tiny_model_gguf();
  zero.tensor("rope_freqs.weight", {2}, 0, test::le_bytes(1.0f) + test::le_bytes(0.0f));
  expect_mentions(test::input_error_of([&] { return load(zero, "zero.gguf"); }),
                  {"rope_freq_factors must be finite and positive, got 0"});
}

// Each malformed file is refused with the problem named, never read past its end.
TEST(Gguf, BadFilesAreRefusedByName) {
  const std::string good = test::tiny_model_gguf().bytes();
  std::string wrong_magic = good;
  wrong_magic[0] = 'X';
  expect_mentions(parse_error(wrong_magic), {"\"XGUF\"", "magic \"GGUF\""});
  expect_mentions(parse_error(test::tiny_model_gguf().bytes(1)), {"version 1", "2 and 3"});
  expect_mentions(parse_error(test::tiny_model_gguf().bytes(4)), {"version 4"});
  // A header that counts more keys than the file can hold.
  std::string many_keys = good;
  const std::string huge = test::le_bytes<std::uint64_t>(1ull << 60);
  many_keys.replace(16, 8, huge);
  expect_mentions(parse_error(many_keys), {"truncated", "metadata keys"});
  // A string length past the end of the file.
  test::GgufWriter long_string = test::tiny_model_gguf();
  long_string.raw("general.description", 8, test::le_bytes<std::uint64_t>(1ull << 40) + "x");
  expect_mentions(parse_error(long_string.bytes()), {"truncated", "general.description"});
  // An array count past the end of the file.
  test::GgufWriter long_array = test::tiny_model_gguf();
  long_array.raw("general.tags", 9,
                 test::le_bytes<std::uint32_t>(4) + test::le_bytes<std::uint64_t>(1ull << 50));
  expect_mentions(parse_error(long_array.bytes()), {"truncated", "general.tags", "array of"});
  test::GgufWriter bad_type = test::tiny_model_gguf();
  bad_type.raw("general.x", 13, "");
  expect_mentions(parse_error(bad_type.bytes()), {"general.x", "value type 13"});
  // Tensor types: one ggml has and kvheap does not read, one nobody defined.
  for (const auto& [type, words] :
       {std::pair<std::uint32_t, const char*>{16, "IQ2_XXS"}, {99, "id 99"}}) {
    test::GgufWriter w = test::tiny_model_gguf();
    w.tensor("extra", {256}, type, std::string(256, '\0'));
    expect_mentions(parse_error(w.bytes()), {"extra", words});
  }
  // A tensor whose data runs past the end, and two that overlap.
  std::string cut = good.substr(0, good.size() - 4);
  expect_mentions(parse_error(cut), {"truncated", "blk.0.ffn_up.weight", "runs past"});
  {
    test::GgufWriter w = test::tiny_model_gguf();
    w.tensor("late", {8}, 0, std::string(32, '\0'));
    std::string bytes = w.bytes();
    // The last tensor info's offset is the 8 bytes before the padding to the data region; point
    // it at offset 0, the first tensor's data.
    const std::string name = test::gguf_string("late");
    const std::size_t info = bytes.find(name);
    ASSERT_NE(info, std::string::npos);
    bytes.replace(info + name.size() + 4 + 8 + 4, 8, test::le_bytes<std::uint64_t>(0));
    expect_mentions(parse_error(bytes), {"overlap", "late"});
  }
  // Well-formed files that are not a model kvheap serves, or not this model.
  const test::TempDir tmp;
  const auto load_error = [&](test::GgufWriter w, const char* name) {
    const std::string path = tmp.file(name);
    test::write_bytes(path, w.bytes());
    return test::input_error_of([&] { return load_model(path); });
  };
  test::GgufWriter twice = test::tiny_model_gguf();
  twice.string("general.architecture", "gemma");  // a second key of that name
  expect_mentions(load_error(twice, "twice.gguf"), {"general.architecture", "twice"});
  {
    test::GgufWriter w;
    w.string("general.architecture", "gemma");
    expect_mentions(load_error(w, "gemma.gguf"), {"'gemma' model", "llama, qwen2, qwen3"});
  }
  {
    test::GgufWriter w;
    w.string("general.architecture", "llama");
    w.u32("llama.embedding_length", 8);
    expect_mentions(load_error(w, "keys.gguf"), {"required key 'llama.block_count'"});
  }
  {
    // Keys of one config, tensors of another: two KV heads of 4 need blk.0.attn_k [8, 8].
    std::string bytes = test::tiny_model_gguf().bytes();
    const std::string key = test::gguf_string("llama.attention.head_count_kv");
    const std::size_t at = bytes.find(key);
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at + key.size() + 4, 4, test::le_bytes<std::uint32_t>(2));
    const std::string path = tmp.file("shape.gguf");
    test::write_bytes(path, bytes);
    expect_mentions(test::input_error_of([&] { return load_model(path); }),
                    {"blk.0.attn_k.weight", "[8, 4]", "needs [8, 8]"});
  }
  test::GgufWriter vocab = test::tiny_model_gguf();
  vocab.u32("llama.vocab_size", 9);  // the embedding has 8 rows, the tokenizer 8 tokens
  expect_mentions(load_error(vocab, "vocab.gguf"), {"vocabulary disagrees", "8 rows", "is 9"});
  {
    test::GgufWriter v;
    v.string("tokenizer.ggml.model", "gpt2");
    v.string("tokenizer.ggml.pre", "dbrx");
    v.strings("tokenizer.ggml.tokens", {"a"});
    v.strings("tokenizer.ggml.merges", {});
    const std::string path = tmp.file("pre.gguf");
    test::write_bytes(path, v.bytes());
    expect_mentions(test::input_error_of([&] { return load_gguf_tokenizer(path); }),
                    {"tokenizer.ggml.pre is 'dbrx'", "smollm"});
  }
  {
    test::GgufWriter v;
    v.string("tokenizer.ggml.model", "bert");
    v.strings("tokenizer.ggml.tokens", {"a"});
    const std::string path = tmp.file("bert.gguf");
    test::write_bytes(path, v.bytes());
    expect_mentions(test::input_error_of([&] { return load_gguf_tokenizer(path); }),
                    {"tokenizer.ggml.model is 'bert'", "gpt2", "llama"});
  }
  // Token types are llama.cpp's small integers; a float array with a huge value is refused
  // before it is converted (the fuzzer found that conversion overflowing).
  for (const float type : {1e30f, -1.0f, 7.0f, 1.5f}) {
    test::GgufWriter v;
    v.string("tokenizer.ggml.model", "gpt2");
    v.strings("tokenizer.ggml.tokens", {"a", "b"});
    v.f32s("tokenizer.ggml.token_type", {1.0f, type});
    v.strings("tokenizer.ggml.merges", {});
    const std::string path = tmp.file("types.gguf");
    test::write_bytes(path, v.bytes());
    expect_mentions(test::input_error_of([&] { return load_gguf_tokenizer(path); }),
                    {"tokenizer.ggml.token_type[1] is", "expected a token type from 0 to 6"});
  }
}

}  // namespace
}  // namespace kvheap
