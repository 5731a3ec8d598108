// Tests for parse_token_ids: accepted spellings, and a message naming the element for every
// malformed or out-of-range case.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.hpp"
#include "common/program/token_ids.hpp"

namespace kvheap {
namespace {

template <typename E>
std::string message_of(std::string_view text, int vocab_size = 512) {
  try {
    (void)parse_token_ids(text, vocab_size);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type for '" << text << "': " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected an exception for '" << text << "'";
  return {};
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(TokenIds, ParsesCommaSeparatedIds) {
  EXPECT_EQ(parse_token_ids("1,2,3", 512), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(parse_token_ids("7", 512), (std::vector<int>{7}));
  EXPECT_EQ(parse_token_ids("0,511", 512), (std::vector<int>{0, 511}));
  EXPECT_EQ(parse_token_ids("1, 403 ,\t407 ", 512), (std::vector<int>{1, 403, 407}));
  EXPECT_EQ(parse_token_ids("  42  ", 512), (std::vector<int>{42}));
  EXPECT_EQ(parse_token_ids("31999", 32000), (std::vector<int>{31999}));
}

TEST(TokenIds, EmptyTextSaysWhatWasExpected) {
  for (const std::string_view text : {"", "   "}) {
    const std::string m = message_of<UsageError>(text);
    EXPECT_CONTAINS(m, "--prompt-ids is empty");
    EXPECT_CONTAINS(m, "1,2,3");
  }
}

TEST(TokenIds, MalformedElementsAreNamedWithTheirPosition) {
  std::string m = message_of<UsageError>("1,2,x7");
  EXPECT_CONTAINS(m, "--prompt-ids: element 3 ('x7') is not an integer");
  EXPECT_CONTAINS(m, "comma-separated token ids like 1,2,3");
  EXPECT_CONTAINS(message_of<UsageError>("5,7x"), "element 2 ('7x') is not an integer");
  EXPECT_CONTAINS(message_of<UsageError>("1.5"), "element 1 ('1.5') is not an integer");
  EXPECT_CONTAINS(message_of<UsageError>("+3"), "element 1 ('+3') is not an integer");
  EXPECT_CONTAINS(message_of<UsageError>("1 2"), "element 1 ('1 2') is not an integer");
  EXPECT_CONTAINS(message_of<UsageError>("1;2"), "element 1 ('1;2') is not an integer");
}

TEST(TokenIds, EmptyElementsAndTrailingCommasAreRejected) {
  EXPECT_CONTAINS(message_of<UsageError>("1,2,"), "element 3 is empty (trailing comma?)");
  EXPECT_CONTAINS(message_of<UsageError>("1,,2"), "element 2 is empty");
  EXPECT_CONTAINS(message_of<UsageError>(",1"), "element 1 is empty");
  EXPECT_CONTAINS(message_of<UsageError>("1, ,2"), "element 2 is empty");
}

TEST(TokenIds, OverflowIsOutOfRangeLikeAnyIdPastTheVocabulary) {
  const std::string m = message_of<UsageError>("1,99999999999999999999");
  EXPECT_CONTAINS(m,
                  "element 2 ('99999999999999999999') is out of range: the model's vocabulary "
                  "has 512 tokens");
}

TEST(TokenIds, OutOfRangeIdsNameTheVocabulary) {
  EXPECT_EQ(message_of<UsageError>("1,600"),
            "--prompt-ids: token id 600 at position 2 is out of range: the model's vocabulary has "
            "512 tokens "
            "(ids 0..511)");
  EXPECT_CONTAINS(message_of<UsageError>("512"), "token id 512 at position 1");
  EXPECT_CONTAINS(message_of<UsageError>("3,-1"), "token id -1 at position 2");
  EXPECT_CONTAINS(message_of<UsageError>("5", 5), "(ids 0..4)");
}

TEST(TokenIds, FlagNameCanBeChosen) {
  try {
    (void)parse_token_ids("", 512, "--ids");
    ADD_FAILURE() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_CONTAINS(e.what(), "--ids is empty");
  }
}

}  // namespace
}  // namespace kvheap
