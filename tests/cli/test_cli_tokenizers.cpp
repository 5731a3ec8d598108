// The chapter programs with real tokenizers: a Hugging Face folder's own tokenizer.json encodes
// --prompt and prints text, --tokenizer takes a tiktoken file, --chat wraps the message in the
// model's format, and bad tokenizers exit 1 with the file and field named. Part of test_cli.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/tokenizer/chat_format.hpp"
#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/run_program.hpp"
#include "tests/support/tokenizer_data.hpp"

namespace kvheap {
namespace {

using test::expect_one_line_error;
using test::run_program;

const char* kCh01 = "ch01_cpu_reference";

// The tiny preset with `rows` embedding rows as a Hugging Face folder in `tmp`, model_type qwen2
// (attention biases) or llama, holding the reference tokenizer `tokenizer` as tokenizer.json.
std::string tiny_folder(const test::TempDir& tmp, int rows, bool qwen,
                        const std::string& tokenizer) {
  ModelConfig c = preset("tiny");
  c.vocab_size = rows;
  c.rope_style = RopeStyle::Halves;
  c.attention_bias = qwen;
  const std::string dir = tmp.file(qwen ? "tiny-qwen" : "tiny-llama");
  test::write_safetensors(test::random_weights(c, 5), dir);
  if (!tokenizer.empty())
    test::write_bytes(dir + "/tokenizer.json", test::reference_tokenizer_json(tokenizer));
  return dir;
}

TEST(Cli, ModelFolderTokenizerEncodesThePromptAndPrintsText) {
  const test::TempDir tmp;
  // More rows than the 16389 ids, as real Qwen checkpoints pad theirs.
  const std::string dir = tiny_folder(tmp, 16448, true, "qwen2");
  const auto r = run_program(kCh01, {"--model", dir, "--prompt", "Hello, world", "--max-new-tokens",
                                     "4", "--no-peak", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const std::unique_ptr<BpeTokenizer> tok = test::reference_tokenizer("qwen2");
  EXPECT_EQ(j.at("prompt_ids").get<std::vector<int>>(), tok->encode("Hello, world", false));
  const auto generated = j.at("generated_ids").get<std::vector<int>>();
  ASSERT_FALSE(generated.empty());
  EXPECT_EQ(j.at("text").get<std::string>(), tok->decode(generated));
  const auto text_run = run_program(
      kCh01, {"--model", dir, "--prompt", "Hello, world", "--max-new-tokens", "4", "--no-peak"});
  ASSERT_EQ(text_run.exit_code, 0) << text_run.err;
  EXPECT_NE(text_run.out.find("text: " + tok->decode(generated) + "\n"), std::string::npos)
      << text_run.out;
}

TEST(Cli, TokenizerFlagReadsATiktokenFile) {
  const test::TempDir tmp;
  const std::string dir = tiny_folder(tmp, 16640, false, "");
  const auto r = run_program(
      kCh01, {"--model", dir, "--tokenizer", test::tokenizer_data("qwen16k.tiktoken"), "--prompt",
              "Once upon a time", "--max-new-tokens", "2", "--no-peak", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto ids = nlohmann::json::parse(r.out).at("prompt_ids").get<std::vector<int>>();
  EXPECT_EQ(ids, test::reference_tokenizer("llama3_tiktoken")->encode("Once upon a time", true));
  EXPECT_EQ(ids.front(), 16384);  // <|begin_of_text|>, right after the 16384 ranks
}

TEST(Cli, ChatWrapsTheMessageInTheModelsFormat) {
  const test::TempDir tmp;
  const std::string dir = tiny_folder(tmp, 16448, true, "qwen2");
  const auto r = run_program(kCh01, {"--model", dir, "--chat", "What is 2+2?", "--system",
                                     "Be brief.", "--max-new-tokens", "2", "--no-peak", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::unique_ptr<BpeTokenizer> tok = test::reference_tokenizer("qwen2");
  EXPECT_EQ(nlohmann::json::parse(r.out).at("prompt_ids").get<std::vector<int>>(),
            tok->encode(chat_prompt(ChatFormat::Qwen2, "Be brief.", "What is 2+2?"), false));
  // A llama model with Qwen's tokenizer has no known format; --chat-format names one.
  const std::string llama = tiny_folder(tmp, 16448, false, "qwen2");
  auto bad = run_program(kCh01, {"--model", llama, "--chat", "hi", "--no-peak"});
  EXPECT_EQ(bad.exit_code, 1);
  expect_one_line_error(bad, "no known chat format fits: model_type 'llama'");
  const auto forced = run_program(kCh01, {"--model", llama, "--chat", "hi", "--chat-format",
                                          "qwen3", "--max-new-tokens", "1", "--no-peak", "--json"});
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_EQ(nlohmann::json::parse(forced.out).at("prompt_ids").get<std::vector<int>>(),
            tok->encode(chat_prompt(ChatFormat::Qwen3, "", "hi"), false));
}

TEST(Cli, BadTokenizersAndChatFlagsExitWithTheProblemNamed) {
  const test::TempDir tmp;
  nlohmann::json j = nlohmann::json::parse(test::reference_tokenizer_json("qwen2"));
  j["model"]["merges"][5] = {"\xC4\xA0t", "no-such-token"};
  const std::string broken = tmp.file("broken.json");
  test::write_bytes(broken, j.dump());
  auto r =
      run_program(kCh01, {"--model", "tiny", "--tokenizer", broken, "--prompt", "hi", "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(
      r, "tokenizer.json '" + broken + "': model.merges[5]: names \"no-such-token\"");
  r = run_program(kCh01,
                  {"--model", "tiny", "--tokenizer", test::tokenizer_data("qwen16k.tokenizer.json"),
                   "--prompt", "hi", "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(
      r, "can produce token ids up to 16388, but the model's embedding has 128 rows");
  r = run_program(kCh01, {"--model", "tiny", "--chat", "hi", "--no-peak"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "--chat needs a tokenizer");
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--system", "x"},
                                               {"--chat-format", "qwen2"},
                                               {"--chat", "hi", "--prompt", "hi"},
                                               {"--chat", "hi", "--prompt-ids", "1"},
                                               {"--chat", ""}}) {
    std::vector<std::string> all = {"--model", "tiny", "--no-peak"};
    all.insert(all.end(), args.begin(), args.end());
    EXPECT_EQ(run_program(kCh01, all).exit_code, 2) << args.front();
  }
  const std::string dir = tiny_folder(tmp, 16448, true, "qwen2");
  r = run_program(kCh01, {"--model", dir, "--chat", "hi", "--chat-format", "vicuna", "--no-peak"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "--chat-format \"vicuna\" is not a chat format kvheap knows");
}

}  // namespace
}  // namespace kvheap
