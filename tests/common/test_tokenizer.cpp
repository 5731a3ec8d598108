// Tests for Tokenizer on the real Llama 2 vocabulary (tokenizer.bin, 32000 tokens): round trips,
// byte fallback, the dummy prefix, agreement with the plain llama2.c merge loop, and the errors for
// a vocabulary of the wrong size. Synthetic files are in test_tokenizer_files.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "common/tokenizer/llama2c_tokenizer.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

using test::expect_input_error;

// ---- helpers ------------------------------------------------------------------------------------

std::vector<std::string> pieces_of(const Llama2cTokenizer& t, const std::vector<int>& ids) {
  std::vector<std::string> out;
  for (const int id : ids) out.emplace_back(t.piece(id));
  return out;
}

// The plain llama2.c loop: rescan every adjacent pair after each merge. encode keeps the pairs in
// a heap instead; this is what it must agree with, token for token.
std::vector<int> reference_encode(const Llama2cTokenizer& t, std::string_view text) {
  std::vector<int> ids;
  auto add = [&](std::string_view bytes) {
    if (const int id = t.find(bytes); id >= 0) {
      ids.push_back(id);
    } else {
      for (const char c : bytes) {
        ids.push_back(Llama2cTokenizer::kFirstByte + static_cast<unsigned char>(c));
      }
    }
  };
  add(" ");
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t n = lead >= 0xF0 && lead < 0xF8 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (lead >= 0xF8 || i + n > text.size()) n = 1;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) n = 1;
    }
    add(text.substr(i, n));
    i += n;
  }
  for (;;) {
    int best_at = -1, best_id = -1;
    float best_score = 0.0f;
    for (std::size_t k = 0; k + 1 < ids.size(); ++k) {
      const int id = t.find(std::string(t.piece(ids[k])) + std::string(t.piece(ids[k + 1])));
      if (id >= 0 && (best_at < 0 || t.score(id) > best_score)) {
        best_at = static_cast<int>(k), best_id = id, best_score = t.score(id);
      }
    }
    if (best_at < 0) break;
    ids[static_cast<std::size_t>(best_at)] = best_id;
    ids.erase(ids.begin() + best_at + 1);
  }
  return ids;
}

const std::vector<std::string>& round_trip_texts() {
  static const std::vector<std::string> texts = {
      "Hello world",
      "Once upon a time, there was a little girl named Lily. She loved to play outside.",
      "Punctuation: !?.,;:'\"()[]{}<>@#$%^&*-_=+/\\|~`",
      "digits 0123456789, pi is 3.14159 and 1e-5 is small",
      "multiple   spaces    between     words",
      "  leading and trailing spaces  ",
      "line one\nline two\n\nline four\n",
      "tabs\tand\r\nwindows line ends",
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x9A\x80 and CJK \xE6\xBC\xA2\xE5\xAD\x97 "  // NOLINT(bugprone-suspicious-missing-comma)
      "\xE3\x81\x8B\xE3\x81\xAA",
      "caf\xC3\xA9 na\xC3\xAFve \xC3\x9C\x62\x65r",
      "\xF0\x9D\x84\x9E clef, \xE1\x9A\xA0 rune, \xF0\x9F\xA6\x99 sauropod",
      "\n",
      "a",
  };
  return texts;
}

// ---- the real Llama 2 vocabulary ----------------------------------------------------------------

TEST(Tokenizer, RealVocabularyRoundTripsText) {
  KVHEAP_REQUIRE_MODEL(path, "tokenizer.bin");
  const Llama2cTokenizer t = Llama2cTokenizer::load(path, 32000);
  EXPECT_EQ(t.vocab_size(), 32000);
  for (const auto& text : round_trip_texts()) {
    SCOPED_TRACE(text);
    const std::vector<int> with_bos = t.encode(text, true);
    EXPECT_EQ(t.decode(with_bos), text);
    EXPECT_EQ(t.decode(t.encode(text, false)), text);
  }
}

TEST(Tokenizer, HeapMergesMatchThePlainLlama2cLoop) {
  KVHEAP_REQUIRE_MODEL(path, "tokenizer.bin");
  const Llama2cTokenizer t = Llama2cTokenizer::load(path, 32000);
  std::vector<std::string> texts = round_trip_texts();
  std::string story;
  for (const auto& text : round_trip_texts()) story += text + " ";
  texts.push_back(story + story);
  // Random mixes of letters, spaces, repeats and multi-byte characters give many equal-score
  // pairs, where only the leftmost-first rule decides the order.
  const std::vector<std::string> alphabet = {"a",
                                             "b",
                                             "e",
                                             "t",
                                             "h",
                                             "s",
                                             " ",
                                             "  ",
                                             "ab",
                                             "the",
                                             ".",
                                             "\n",
                                             "\xC3\xA9",
                                             "\xE6\xBC\xA2",
                                             "\xF0\x9F\x98\x80",
                                             "\xFF"};
  std::uint64_t state = 12345;
  for (int n = 0; n < 60; ++n) {
    std::string text;
    for (int k = 0; k < 5 + n * 3; ++k) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;  // any fixed LCG will do
      text += alphabet[(state >> 33) % alphabet.size()];
    }
    texts.push_back(text);
  }
  for (const auto& text : texts) {
    SCOPED_TRACE(testing::PrintToString(text));
    EXPECT_EQ(t.encode(text, false), reference_encode(t, text));
    EXPECT_EQ(t.decode(t.encode(text, true)), text);
  }
}

TEST(Tokenizer, CharactersOutsideTheVocabularyUseByteTokens) {
  KVHEAP_REQUIRE_MODEL(path, "tokenizer.bin");
  const Llama2cTokenizer t = Llama2cTokenizer::load(path, 32000);
  EXPECT_EQ(t.piece(Llama2cTokenizer::kFirstByte + 0x0A), "<0x0A>");
  EXPECT_EQ(t.decode_piece(0, Llama2cTokenizer::kFirstByte + 0x0A), "\n");
  bool used_bytes = false;
  for (const auto& text : round_trip_texts()) {
    for (const int id : t.encode(text, false)) {
      used_bytes |= id >= Llama2cTokenizer::kFirstByte && id < Llama2cTokenizer::kFirstByte + 256;
    }
  }
  EXPECT_TRUE(used_bytes) << "no test text exercised byte fallback; add a rarer character";
}

TEST(Tokenizer, InvalidUtf8IsEncodedByteByByte) {
  KVHEAP_REQUIRE_MODEL(path, "tokenizer.bin");
  const Llama2cTokenizer t = Llama2cTokenizer::load(path, 32000);
  // A stray continuation byte, a lead byte cut short, bytes that never occur in UTF-8, a lead
  // byte whose continuation is missing: each bad byte must come out as its own byte token.
  const std::vector<std::pair<std::string, std::vector<unsigned char>>> cases = {
      {"\x80", {0x80}},
      {"ab\xE6\xBC", {0xE6, 0xBC}},
      {"\xFF\xFE x \xC3", {0xFF, 0xFE, 0xC3}},
      {"\xC3(\xA9", {0xC3, 0xA9}}};
  for (const auto& [text, bad_bytes] : cases) {
    SCOPED_TRACE(testing::PrintToString(text));
    const std::vector<int> ids = t.encode(text, true);
    EXPECT_EQ(t.decode(ids), text);
    for (const unsigned char b : bad_bytes) {
      EXPECT_NE(std::find(ids.begin(), ids.end(), Llama2cTokenizer::kFirstByte + b), ids.end())
          << "byte 0x" << std::hex << int{b} << " was not encoded as its byte token";
    }
  }
  EXPECT_EQ(t.encode("\x80", false),
            (std::vector<int>{t.find(" "), Llama2cTokenizer::kFirstByte + 0x80}));
}

TEST(Tokenizer, EncodingStartsWithBosAndADummyPrefixSpace) {
  KVHEAP_REQUIRE_MODEL(path, "tokenizer.bin");
  const Llama2cTokenizer t = Llama2cTokenizer::load(path, 32000);
  const std::vector<int> ids = t.encode("Hello world", true);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], Llama2cTokenizer::kBos);
  // llama2.c exports BOS as "\n<s>\n"; decode must not print it.
  EXPECT_EQ(pieces_of(t, {ids[1], ids[2]}), (std::vector<std::string>{" Hello", " world"}));
  EXPECT_EQ(t.encode("Hello world", false), std::vector<int>(ids.begin() + 1, ids.end()));
  // The dummy prefix makes a text's first word the same token as that word mid-sentence.
  EXPECT_EQ(t.encode("world", false), std::vector<int>{ids[2]});
  // After BOS the prefix space is dropped on output; mid-sentence it is kept.
  EXPECT_EQ(t.decode_piece(Llama2cTokenizer::kBos, ids[1]), "Hello");
  EXPECT_EQ(t.decode_piece(ids[1], ids[2]), " world");
  EXPECT_EQ(t.encode("", true), std::vector<int>{Llama2cTokenizer::kBos});
  EXPECT_TRUE(t.encode("", false).empty());
  EXPECT_EQ(
      t.decode(std::vector<int>{Llama2cTokenizer::kBos, ids[1], ids[2], Llama2cTokenizer::kEos}),
      "Hello world");
}

TEST(Tokenizer, WrongVocabularySizeNamesTheMismatch) {
  KVHEAP_REQUIRE_MODEL(path, "tokenizer.bin");
  expect_input_error([&] { (void)Llama2cTokenizer::load(path, 512); },
                     {"bytes left after the last of its 512 tokens", "31488 more tokens",
                      "32000-token vocabulary", "belongs to a different model"});
  expect_input_error([&] { (void)Llama2cTokenizer::load(path, 40000); },
                     {"holds only 32000 tokens", "40000"});
  expect_input_error([&] { (void)Llama2cTokenizer::load(path, 0); }, {"vocab_size"});
}

TEST(Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  KVHEAP_REQUIRE_MODEL(path, "tokenizer.bin");
  const Llama2cTokenizer t = Llama2cTokenizer::load(path, 32000);
  expect_input_error(
      [&] {
        (void)t.decode(std::vector<int>{1, 32000});
      },
      {"token id 32000", "32000 tokens"});
  expect_input_error([&] { (void)t.decode_piece(1, -1); }, {"token id -1", "0..31999"});
  expect_input_error([&] { (void)t.piece(32000); }, {"32000"});
}

}  // namespace
}  // namespace kvheap
