// Tests of --chat's formats: each one's ids equal the reference library's ids for the text that
// docs/pages/chat_formats.md states (reference.json "chat"), and a model is matched to its format
// or refused by name.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/error.hpp"
#include "common/tokenizer/chat_format.hpp"
#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/tokenizer_data.hpp"

namespace kvheap {
namespace {

namespace fs = std::filesystem;

std::string tokenizer_for(const std::string& format) {
  if (format == "llama3") return "llama3";
  if (format == "mistral") return "mistral";
  return "qwen2";
}

TEST(ChatFormat, EachFormatGivesTheIdsOfItsStatedTextTokenForToken) {
  int compared = 0;
  for (const nlohmann::json& c : test::tokenizer_reference().at("chat")) {
    const std::string name = c.at("family");
    SCOPED_TRACE(name + ", system \"" + c.at("system").get<std::string>() + "\"");
    const ChatFormat format = parse_chat_format(name);
    const std::string text =
        chat_prompt(format, c.at("system").get<std::string>(), c.at("message").get<std::string>());
    EXPECT_EQ(text, c.at("text").get<std::string>());
    const std::unique_ptr<BpeTokenizer> tok = test::reference_tokenizer(tokenizer_for(name));
    EXPECT_EQ(tok->encode(text, false), c.at("ids").get<std::vector<int>>());
    EXPECT_EQ(chat_end_of_turn(format, *tok),
              tok->special_id(format == ChatFormat::Mistral  ? "</s>"
                              : format == ChatFormat::Llama3 ? "<|eot_id|>"
                                                             : "<|im_end|>"));
    ++compared;
  }
  EXPECT_EQ(compared, 12);  // four formats, three messages each
}

// A folder in `tmp` with a config.json of `model_type` and the tokenizer `tokenizer_name`.
std::string chat_folder(const test::TempDir& tmp, const std::string& model_type,
                        const std::string& tokenizer_name) {
  const fs::path dir = tmp.path() / (model_type + "_" + tokenizer_name);
  fs::create_directories(dir);
  test::write_bytes((dir / "config.json").string(),
                    nlohmann::json{{"model_type", model_type}}.dump());
  test::write_bytes((dir / "tokenizer.json").string(),
                    test::reference_tokenizer_json(tokenizer_name));
  return dir.string();
}

TEST(ChatFormat, TheModelTypeAndTokenizerPickTheFormat) {
  const test::TempDir tmp;
  for (const auto& [type, tok_name, want] : {std::tuple{"qwen2", "qwen2", ChatFormat::Qwen2},
                                             std::tuple{"qwen3", "qwen2", ChatFormat::Qwen3},
                                             std::tuple{"mistral", "mistral", ChatFormat::Mistral},
                                             std::tuple{"llama", "llama3", ChatFormat::Llama3}}) {
    const std::unique_ptr<BpeTokenizer> tok = test::reference_tokenizer(tok_name);
    EXPECT_EQ(detect_chat_format(chat_folder(tmp, type, tok_name), *tok), want) << type;
  }
}

TEST(ChatFormat, FamiliesWithoutAKnownFormatAreRefusedByName) {
  // Llama 2 / TinyLlama: model_type llama with a SentencePiece tokenizer.
  const test::TempDir tmp;
  const std::string llama2 = chat_folder(tmp, "llama", "mistral");
  const std::unique_ptr<BpeTokenizer> tok = test::reference_tokenizer("mistral");
  const std::string why = test::input_error_of([&] { return detect_chat_format(llama2, *tok); });
  EXPECT_NE(why.find("model_type 'llama'"), std::string::npos) << why;
  EXPECT_NE(why.find("llama3, qwen2, qwen3, mistral"), std::string::npos) << why;
  EXPECT_NE(why.find("does not interpret a chat_template"), std::string::npos) << why;
  const std::string gemma = chat_folder(tmp, "gemma", "qwen2");
  EXPECT_NE(test::input_error_of([&] {
              return detect_chat_format(gemma, *tok);
            }).find("model_type 'gemma'"),
            std::string::npos);
  EXPECT_NE(test::input_error_of([&] {
              return detect_chat_format("tiny", *tok);
            }).find("not a Hugging Face folder"),
            std::string::npos);
  EXPECT_THROW((void)parse_chat_format("vicuna"), UsageError);
  // A format whose special tokens the tokenizer lacks would encode them as plain text.
  const std::string lacks =
      test::input_error_of([&] { return chat_end_of_turn(ChatFormat::Qwen2, *tok); });
  EXPECT_NE(lacks.find("<|im_start|>"), std::string::npos) << lacks;
}

}  // namespace
}  // namespace kvheap
