// Tests that malformed tokenizer.json and tiktoken files, and tokenizers of another model, are
// refused with a message naming the file and the field (exit status 1 in the programs).
#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"
#include "common/tokenizer/tiktoken_file.hpp"
#include "common/tokenizer/tokenizer_files.hpp"
#include "common/tokenizer/tokenizer_json.hpp"
#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/tokenizer_data.hpp"

namespace kvheap {
namespace {

// A small valid byte-level tokenizer.json: the 256 byte tokens, "ab" and "abc", two merges.
nlohmann::json small_byte_level() {
  nlohmann::json vocab = nlohmann::json::object();
  const auto& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    const char32_t cp = alphabet[static_cast<std::size_t>(b)];
    if (cp < 0x80) {
      ch = std::string(1, static_cast<char>(cp));
    } else {
      ch += static_cast<char>(0xC0 | (cp >> 6));
      ch += static_cast<char>(0x80 | (cp & 0x3F));
    }
    vocab[ch] = b;
  }
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "ab c"}}}},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", R"( ?\p{L}+|\s+)"}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"added_tokens",
           {{{"id", 258}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}}}}};
}

std::string error_of(const nlohmann::json& j) {
  return test::input_error_of(
      [&] { return parse_tokenizer_json(j.dump(), "PATH/tokenizer.json"); });
}

void expect_mentions(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << message << "\nlacks: " << p;
}

TEST(TokenizerFiles, TheSmallTokenizerJsonIsValid) {
  const BpeTokenizer tok(parse_tokenizer_json(small_byte_level().dump(), "small"));
  EXPECT_EQ(tok.encode("abc ab<|end|>", false), (std::vector<int>{257, ' ', 256, 258}));
  EXPECT_EQ(tok.vocab_size(), 259);
}

// An id past the tokenizer's vocabulary (a padded embedding row, or another model's tokenizer)
// is named with the tokenizer and both likely causes, not only "not in the vocabulary".
TEST(TokenizerFiles, AnIdPastTheTokenizerNamesTheLikelyCause) {
  const BpeTokenizer tok(parse_tokenizer_json(small_byte_level().dump(), "PATH/tokenizer.json"));
  const std::vector<int> ids = {257, 300};
  const std::string why = test::input_error_of([&] { return tok.decode(ids); });
  EXPECT_NE(why.find("token id 300 is not in the vocabulary of tokenizer.json "
                     "'PATH/tokenizer.json' (ids 0..258); a model whose ids go past its "
                     "tokenizer's was given a tokenizer of another model, or pads its embedding"),
            std::string::npos)
      << why;
}

std::string base64(std::string_view bytes) {
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k)
      v = (v << 8) | (i + k < bytes.size() ? static_cast<unsigned char>(bytes[i + k]) : 0U);
    for (std::size_t k = 0; k < 4; ++k)
      out += k <= (bytes.size() - i) ? kDigits[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// tiktoken, and a tokenizer.json with ignore_merges (Llama 3), look a whole piece up before
// merging: a token no chain of merges reaches is still found.
TEST(TokenizerFiles, AWholeTokenNoMergeReachesIsFoundWhenMergesAreIgnored) {
  std::string text;
  for (int b = 0; b < 256; ++b)
    text += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  text += base64("abc") + " 256\n";  // neither "ab" nor "bc" is a token
  const BpeTokenizer tiktoken(parse_tiktoken(text, "abc.tiktoken"));
  EXPECT_EQ(tiktoken.encode("abc", false), std::vector<int>{256});
  EXPECT_EQ(tiktoken.encode("abcd", false), (std::vector<int>{'a', 'b', 'c', 'd'}));
  nlohmann::json j = small_byte_level();
  j["model"]["vocab"]["xyz"] = 259;
  EXPECT_EQ(BpeTokenizer(parse_tokenizer_json(j.dump(), "xyz")).encode("xyz", false),
            (std::vector<int>{'x', 'y', 'z'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(BpeTokenizer(parse_tokenizer_json(j.dump(), "xyz")).encode("xyz", false),
            std::vector<int>{259});
}

// SentencePiece-style text is merged word by word only when no token joins a word to the next
// word's marker; a vocabulary with such a token ("a▁b") is merged across words.
TEST(TokenizerFiles, SentencePieceMergesCrossWordsWhenATokenDoes) {
  const std::string m = "\xE2\x96\x81";  // ▁
  nlohmann::json j = {{"model",
                       {{"type", "BPE"},
                        {"unk_token", "<unk>"},
                        {"vocab",
                         {{"<unk>", 0},
                          {m, 1},
                          {"a", 2},
                          {"b", 3},
                          {"a" + m, 4},
                          {"a" + m + "b", 5},
                          {m + "a", 6}}},
                        {"merges", {"a " + m, "a" + m + " b", m + " a"}}}},
                      {"normalizer",
                       {{"type", "Sequence"},
                        {"normalizers",
                         {{{"type", "Prepend"}, {"prepend", m}},
                          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}}}}}},
                      {"decoder",
                       {{"type", "Sequence"},
                        {"decoders",
                         {{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
                          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}}};
  const BpeTokenizer crossing(parse_tokenizer_json(j.dump(), "crossing"));
  EXPECT_EQ(crossing.encode("a b", false), (std::vector<int>{1, 5}));
  EXPECT_EQ(crossing.decode(std::vector<int>{1, 5}), "a b");
  j["model"]["vocab"].erase("a" + m + "b");
  j["model"]["vocab"].erase("a" + m);
  j["model"]["merges"] = {m + " a"};
  const BpeTokenizer words(parse_tokenizer_json(j.dump(), "words"));
  EXPECT_EQ(words.encode("a b", false), (std::vector<int>{6, 1, 3}));
}

TEST(TokenizerFiles, MalformedTokenizerJsonNamesTheFileAndTheField) {
  expect_mentions(test::input_error_of(
                      [] { return parse_tokenizer_json("{\"model\": ", "PATH/tokenizer.json"); }),
                  {"'PATH/tokenizer.json' is not valid JSON"});
  nlohmann::json j = small_byte_level();
  j["model"]["type"] = "Unigram";
  expect_mentions(error_of(j),
                  {"'PATH/tokenizer.json'", "model.type", "'Unigram' is not supported"});
  j = small_byte_level();
  j["model"]["merges"].push_back("a zz");
  expect_mentions(error_of(j), {"model.merges[2]", "names \"zz\", which is not in model.vocab"});
  j = small_byte_level();
  j["model"]["merges"].push_back("a b");
  expect_mentions(error_of(j), {"model.merges[2]", "repeats model.merges[0]"});
  j = small_byte_level();
  j["model"]["vocab"]["abc"] = 256;  // the id of "ab"
  expect_mentions(error_of(j), {"model.vocab", "both have id 256"});
  j = small_byte_level();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+";
  expect_mentions(error_of(j), {"pre_tokenizer.pretokenizers[0].pattern", "does not compile",
                                "missing closing parenthesis"});
  j = small_byte_level();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_mentions(error_of(j), {"normalizer.type", "'Lowercase' is not supported"});
  j = small_byte_level();
  j["added_tokens"][0]["lstrip"] = true;
  expect_mentions(error_of(j), {"added_tokens[0].lstrip", "not supported"});
  // One id, one text: a second added token on an id, or one on a vocabulary entry's id with
  // other text, would encode to an id that decodes to something else (found by fuzzing).
  j = small_byte_level();
  j["added_tokens"].push_back(
      {{"id", 258}, {"content", "<think>"}, {"special", false}, {"normalized", false}});
  expect_mentions(error_of(j), {"added_tokens[1].id", "258 is also added_tokens[0]'s", "<|end|>"});
  j = small_byte_level();
  j["added_tokens"][0]["id"] = 256;
  expect_mentions(error_of(j), {"added_tokens[0].id", "256 is model.vocab's \"ab\"", "<|end|>"});
  j = small_byte_level();
  j["added_tokens"].push_back(
      {{"id", 257}, {"content", "abc"}, {"special", false}, {"normalized", false}});
  EXPECT_NO_THROW(parse_tokenizer_json(j.dump(), "PATH"));  // the same text: as Llama 2's <s>
  j = small_byte_level();
  j["model"]["vocab"].erase("c");
  expect_mentions(error_of(j), {"model.merges[1]", "\"c\""});
  j = small_byte_level();
  j["model"]["vocab"]["\xE2\x82\xAC"] = 300;  // the euro sign is no byte-level character
  expect_mentions(error_of(j), {"model.vocab", "U+20AC", "not in the byte-level alphabet"});
}

TEST(TokenizerFiles, MalformedTiktokenFilesNameTheLine) {
  expect_mentions(test::input_error_of([] { return parse_tiktoken("IQ== 0\nIg== 0\n", "PATH"); }),
                  {"tiktoken file 'PATH' line 2", "rank 0 is also on line 1"});
  expect_mentions(test::input_error_of([] { return parse_tiktoken("IQ== 0\nIQ== 1\n", "PATH"); }),
                  {"line 2", "also rank 0"});
  expect_mentions(test::input_error_of([] { return parse_tiktoken("IQ==0\n", "PATH"); }),
                  {"line 1", "no space"});
  expect_mentions(test::input_error_of([] { return parse_tiktoken("I*== 0\n", "PATH"); }),
                  {"line 1", "not base64"});
  expect_mentions(test::input_error_of([] { return parse_tiktoken("IQ== x\n", "PATH"); }),
                  {"line 1", "rank"});
  expect_mentions(test::input_error_of([] { return parse_tiktoken("\n\n", "PATH"); }),
                  {"holds no token"});
  // Valid lines but not every byte: byte-level BPE could not encode the others.
  expect_mentions(
      test::input_error_of([] { return BpeTokenizer(parse_tiktoken("IQ== 0\n", "PATH")); }),
      {"no token for byte 0x00"});
}

// A tokenizer that can produce an id at or past the model's embedding rows is refused, and so is
// one that leaves more rows without text than padding does; a few rows fewer is what Qwen ships.
TEST(TokenizerFiles, TokenizersWithIdsPastTheEmbeddingRowsAreRefused) {
  const std::string path = test::tokenizer_data("qwen16k.tokenizer.json");
  const std::unique_ptr<Tokenizer> fits = load_tokenizer_file(path, 16389);  // 16384 + 5 added
  EXPECT_EQ(fits->vocab_size(), 16389);
  EXPECT_NE(load_tokenizer_file(path, 16389 + 1023), nullptr);  // padding
  // A thousand ids without text, or an eighth of the rows, is another model's tokenizer.
  expect_mentions(test::input_error_of([&] { return load_tokenizer_file(path, 16389 + 1024); }),
                  {path, "has 16389 token ids", "17413 rows", "1024 ids would have no text",
                   "belongs to a different model"});
  expect_mentions(test::input_error_of([&] { return load_tokenizer_file(path, 16388); }),
                  {path, "can produce token ids up to 16388", "embedding has 16388 rows"});
  const std::string tiktoken = test::tokenizer_data("qwen16k.tiktoken");
  EXPECT_EQ(load_tokenizer_file(tiktoken, 16640)->vocab_size(), 16640);  // 256 Llama 3 specials
  expect_mentions(test::input_error_of([&] { return load_tokenizer_file(tiktoken, 16639); }),
                  {"up to 16639"});
}

TEST(TokenizerFiles, FoldersAreSearchedForTheirTokenizer) {
  const test::TempDir tmp;
  expect_mentions(
      test::input_error_of([&] { return load_tokenizer_file(tmp.path().string(), 100); }),
      {"holds no tokenizer.json"});
  std::filesystem::create_directories(tmp.path() / "original");
  test::write_bytes(tmp.file("original/tokenizer.model"),
                    test::read_bytes(test::tokenizer_data("qwen16k.tiktoken")));
  EXPECT_EQ(find_tokenizer_file(tmp.path().string()), tmp.file("original/tokenizer.model"));
  EXPECT_EQ(load_tokenizer_file(tmp.path().string(), 16640)->vocab_size(), 16640);
  test::write_bytes(tmp.file("tokenizer.json"),
                    test::read_bytes(test::tokenizer_data("qwen16k.tokenizer.json")));
  EXPECT_EQ(find_tokenizer_file(tmp.path().string()), tmp.file("tokenizer.json"));
  const test::TempDir sp;
  test::write_bytes(sp.file("tokenizer.model"), std::string("\x0a\x0b\x0a\x05<unk>", 9));
  expect_mentions(test::input_error_of([&] { return find_tokenizer_file(sp.path().string()); }),
                  {"a SentencePiece model, which kvheap does not read"});
}

}  // namespace
}  // namespace kvheap
