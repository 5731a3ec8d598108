// Tests that the BPE tokenizers give the independent libraries' ids on real vocabularies: Qwen's
// byte-level BPE read as a Qwen2-, Llama 3- and GPT-2-style tokenizer.json (Hugging Face
// tokenizers' ids) and as a Llama 3 tiktoken file (tiktoken's ids), and Mistral's SentencePiece
// vocabulary as a tokenizer.json in both of its forms. The cases and ids are in
// tests/data/tokenizers/reference.json (scripts/make_tokenizer_testdata.py wrote them).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/tokenizer/split_pattern.hpp"
#include "common/tokenizer/utf8.hpp"
#include "tests/support/tokenizer_data.hpp"

namespace kvheap {
namespace {

using test::reference_case_text;
using test::reference_tokenizer;
using test::tokenizer_reference;

std::vector<int> ids_of(const nlohmann::json& j) { return j.get<std::vector<int>>(); }

// Every case through tokenizer `name`: ids without and with BOS, and the text of the ids with and
// without special tokens. Returns the number of cases compared.
int expect_reference_ids(const std::string& name) {
  const std::unique_ptr<BpeTokenizer> tok = reference_tokenizer(name);
  const nlohmann::json& cases = tokenizer_reference().at("tokenizers").at(name);
  int compared = 0;
  for (const auto& [case_name, want] : cases.items()) {
    SCOPED_TRACE(name + " / " + case_name);
    const std::string text = reference_case_text(case_name);
    const std::vector<int> ids = tok->encode(text, false);
    EXPECT_EQ(ids, ids_of(want.at("ids")));
    if (want.contains("with_bos")) {
      EXPECT_EQ(tok->encode(text, true), ids_of(want.at("with_bos")));
    }
    EXPECT_EQ(tok->decode(ids, /*skip_special=*/false), want.at("decoded").get<std::string>());
    if (want.contains("decoded_skip_special")) {
      EXPECT_EQ(tok->decode(ids), want.at("decoded_skip_special").get<std::string>());
    }
    ++compared;
  }
  return compared;
}

TEST(TokenizerReference, QwenTokenizerJsonGivesHuggingFaceIds) {
  EXPECT_EQ(expect_reference_ids("qwen2"), 13);
}

TEST(TokenizerReference, Llama3TokenizerJsonGivesHuggingFaceIds) {
  EXPECT_EQ(expect_reference_ids("llama3"), 13);
}

TEST(TokenizerReference, Gpt2TokenizerJsonGivesHuggingFaceIds) {
  EXPECT_EQ(expect_reference_ids("gpt2"), 13);
}

TEST(TokenizerReference, Llama3TiktokenFileGivesTiktokenIds) {
  EXPECT_EQ(expect_reference_ids("llama3_tiktoken"), 13);
}

TEST(TokenizerReference, MistralSentencePieceTokenizerJsonGivesHuggingFaceIds) {
  EXPECT_EQ(expect_reference_ids("mistral"), 13);
}

TEST(TokenizerReference, MetaspaceFormOfTheSameVocabularyGivesHuggingFaceIds) {
  EXPECT_EQ(expect_reference_ids("metaspace"), 13);
}

// The split patterns alone against the reference pre-tokenizer: where numbers, white space,
// contractions and punctuation are cut decides every id after it.
TEST(TokenizerReference, SplitPatternsCutTextWhereTheReferenceDoes) {
  const nlohmann::json qwen_json = nlohmann::json::parse(test::reference_tokenizer_json("qwen2"));
  const std::string qwen_pattern =
      qwen_json.at("pre_tokenizer").at("pretokenizers").at(0).at("pattern").at("Regex");
  const SplitPattern qwen(qwen_pattern, "qwen"), llama3(SplitPattern::kLlama3, "llama3"),
      gpt2(SplitPattern::kGpt2, "gpt2");
  for (const auto& [name, pattern] :
       {std::pair{"qwen2", &qwen}, std::pair{"llama3", &llama3}, std::pair{"gpt2", &gpt2}}) {
    for (const auto& [case_name, want] : tokenizer_reference().at("tokenizers").at(name).items()) {
      SCOPED_TRACE(std::string(name) + " / " + case_name);
      std::string text = utf8_replace_invalid(reference_case_text(case_name));
      if (std::string(name) == "qwen2") text = utf8_nfc(text);
      std::vector<std::string_view> pieces;
      pattern->split(text, pieces);
      EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()),
                want.at("pieces").get<std::vector<std::string>>());
    }
  }
}

// Python's bytes.decode(errors="replace") made the reference texts of the invalid UTF-8 case;
// kvheap's replacement must cut the same maximal parts.
TEST(TokenizerReference, InvalidUtf8IsReplacedAsPythonDoes) {
  const std::string bytes = reference_case_text("invalid_utf8");
  ASSERT_FALSE(utf8_valid(bytes));
  const std::string want =
      tokenizer_reference().at("tokenizers").at("qwen2").at("invalid_utf8").at("decoded");
  EXPECT_EQ(utf8_replace_invalid(bytes), want);
  EXPECT_TRUE(utf8_valid(want));
}

// Streaming: the text printed token by token equals the whole decode, and no push ever ends inside
// a character, though emoji and CJK characters here span several byte tokens.
TEST(TokenizerReference, StreamedTextEqualsDecodeAndNeverSplitsACharacter) {
  for (const std::string name : {"qwen2", "llama3", "mistral", "metaspace", "llama3_tiktoken"}) {
    const std::unique_ptr<BpeTokenizer> tok = reference_tokenizer(name);
    int held_back = 0;
    for (const auto& [case_name, want] : tokenizer_reference().at("tokenizers").at(name).items()) {
      SCOPED_TRACE(name + " / " + case_name);
      const std::vector<int> ids = ids_of(want.at("ids"));
      TextStream stream(*tok);
      std::string streamed;
      for (const int id : ids) {
        const std::string out = stream.push(id);
        EXPECT_TRUE(utf8_valid(out)) << "push of id " << id << " printed half a character";
        held_back += out.empty() && !tok->is_special(id);
        streamed += out;
      }
      streamed += stream.finish();
      EXPECT_EQ(streamed, tok->decode(ids));
    }
    EXPECT_GT(held_back, 0) << name << ": no token was held back, so nothing tested the holding";
  }
}

// A character cut between two tokens prints once whole, and a stream that ends inside one prints
// U+FFFD for the bytes it holds.
TEST(TokenizerReference, StreamHoldsACharacterUntilItIsWhole) {
  const std::unique_ptr<BpeTokenizer> tok = reference_tokenizer("qwen2");
  const std::vector<int> ids = tok->encode("\xE4\xBD\xA0", false);  // 你: 3 bytes
  ASSERT_GE(ids.size(), 2U) << "expected the character to span tokens in the 16k vocabulary";
  TextStream stream(*tok);
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(stream.push(ids[i]), "");
  EXPECT_EQ(stream.push(ids.back()), "\xE4\xBD\xA0");
  TextStream cut(*tok);
  EXPECT_EQ(cut.push(ids[0]), "");
  EXPECT_EQ(cut.finish(), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace kvheap
