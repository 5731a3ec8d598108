// Tests for Tokenizer on small synthetic tokenizer files: the merge order decided by scores, and
// the error messages for missing, truncated and corrupt files.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "base/error.hpp"
#include "common/tokenizer/llama2c_tokenizer.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

using test::expect_input_error;

namespace fs = std::filesystem;

// ---- helpers ------------------------------------------------------------------------------------

// A fresh directory per test, removed afterwards; ctest runs tests in parallel processes, so
// the name carries the test and the process id.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            (std::string("kvheap_tok_") + info->name() + "_" + std::to_string(::getpid()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string write(const std::string& name, const std::string& bytes) const {
    const fs::path p = path_ / name;
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }

 private:
  fs::path path_;
};

// Byte-level writer for tokenizer files, including deliberately broken ones.
struct FileBytes {
  std::string bytes;
  void i32(std::int32_t v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void f32(float v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void token(float score, std::string_view piece) {
    f32(score);
    i32(static_cast<std::int32_t>(piece.size()));
    bytes.append(piece);
  }
  std::string save(const TempDir& dir, const std::string& name) const {
    return dir.write(name, bytes);
  }
};

// <unk> <s> </s>, then the given (piece, score) pairs: the shape of a sentencepiece export.
std::string write_vocab(const TempDir& dir, const std::string& name,
                        const std::vector<std::pair<std::string, float>>& pieces) {
  FileBytes f;
  f.i32(16);
  f.token(0.0f, "<unk>");
  f.token(0.0f, "<s>");
  f.token(0.0f, "</s>");
  for (const auto& [piece, score] : pieces) f.token(score, piece);
  return f.save(dir, name);
}

std::vector<std::string> pieces_of(const Llama2cTokenizer& t, const std::vector<int>& ids) {
  std::vector<std::string> out;
  for (const int id : ids) out.emplace_back(t.piece(id));
  return out;
}

// ---- merge order and broken files ---------------------------------------------------------------

TEST(Tokenizer, HigherScoringPairMergesFirst) {
  const TempDir dir;
  // "abc" can become "ab"+"c" or "a"+"bc"; only the scores decide which.
  const std::vector<std::pair<std::string, float>> base = {
      {" ", -1.0f}, {"a", -1.0f}, {"b", -1.0f}, {"c", -1.0f}};
  auto with = [&](float ab, float bc) {
    auto v = base;
    v.emplace_back("ab", ab);
    v.emplace_back("bc", bc);
    return v;
  };
  const Llama2cTokenizer ab_first =
      Llama2cTokenizer::load(write_vocab(dir, "ab.bin", with(-2.0f, -5.0f)), 9);
  EXPECT_EQ(pieces_of(ab_first, ab_first.encode("abc", false)),
            (std::vector<std::string>{" ", "ab", "c"}));
  const Llama2cTokenizer bc_first =
      Llama2cTokenizer::load(write_vocab(dir, "bc.bin", with(-5.0f, -2.0f)), 9);
  EXPECT_EQ(pieces_of(bc_first, bc_first.encode("abc", false)),
            (std::vector<std::string>{" ", "a", "bc"}));
  // Equal scores: the leftmost pair wins, as in llama2.c.
  const Llama2cTokenizer tie =
      Llama2cTokenizer::load(write_vocab(dir, "tie.bin", with(-3.0f, -3.0f)), 9);
  EXPECT_EQ(pieces_of(tie, tie.encode("abc", true)),
            (std::vector<std::string>{"<s>", " ", "ab", "c"}));
}

TEST(Tokenizer, MergesChainUntilNoPairIsInTheVocabulary) {
  const TempDir dir;
  const std::string path = write_vocab(dir, "chain.bin",
                                       {{" ", 0.0f},
                                        {"a", 0.0f},
                                        {"b", 0.0f},
                                        {"ab", -1.0f},
                                        {"abab", -2.0f},
                                        {" abab", -3.0f},
                                        {" a", -9.0f}});
  const Llama2cTokenizer t = Llama2cTokenizer::load(path, 10);
  // ab ab -> abab -> " abab"; " a" scores too low to steal the first 'a' early.
  EXPECT_EQ(pieces_of(t, t.encode("abab", false)), (std::vector<std::string>{" abab"}));
  EXPECT_EQ(pieces_of(t, t.encode("ababa", false)), (std::vector<std::string>{" abab", "a"}));
  EXPECT_EQ(t.decode(t.encode("ababa", true)), "ababa");
  // No byte tokens in a 10-token vocabulary: an unknown character is an error, not a crash.
  expect_input_error([&] { (void)t.encode("abz", false); }, {"0x7A", "byte"});
}

TEST(Tokenizer, MissingFileIsReportedWithItsPath) {
  expect_input_error(
      [] { (void)Llama2cTokenizer::load("/nonexistent/kvheap/tokenizer.bin", 32000); },
      {"cannot open", "/nonexistent/kvheap/tokenizer.bin"});
}

TEST(Tokenizer, TruncatedFilesNameTheTokenWhereTheyEnd) {
  const TempDir dir;
  FileBytes f;
  f.i32(8);
  f.token(0.0f, "<unk>");
  FileBytes cut_piece = f;
  cut_piece.f32(0.0f);
  cut_piece.i32(10);
  cut_piece.bytes += "<s";  // 2 of the 10 declared bytes
  expect_input_error([&] { (void)Llama2cTokenizer::load(cut_piece.save(dir, "piece.bin"), 3); },
                     {"truncated inside token 1", "10 bytes", "found 2"});
  FileBytes cut_header = f;
  cut_header.bytes += "\x01\x02\x03";
  expect_input_error([&] { (void)Llama2cTokenizer::load(cut_header.save(dir, "header.bin"), 3); },
                     {"truncated inside token 1"});
  expect_input_error(
      [&] { (void)Llama2cTokenizer::load(FileBytes{"\x10"}.save(dir, "tiny.bin"), 3); },
      {"too short"});
}

TEST(Tokenizer, GarbageLengthsAreRejected) {
  const TempDir dir;
  for (const std::int32_t bad : {-1, 0x7fffffff, -2147483647 - 1}) {
    SCOPED_TRACE(bad);
    FileBytes f;
    f.i32(8);
    f.token(0.0f, "<unk>");
    f.f32(0.0f);
    f.i32(bad);
    f.bytes += "<s>";
    expect_input_error([&] { (void)Llama2cTokenizer::load(f.save(dir, "len.bin"), 3); },
                       {"token 1 has a length of", std::to_string(bad)});
    FileBytes header;
    header.i32(bad);
    expect_input_error([&] { (void)Llama2cTokenizer::load(header.save(dir, "max.bin"), 3); },
                       {"max_token_length"});
  }
}

// The file goes on after vocab_size tokens: a larger vocabulary, or bytes that are no record.
TEST(Tokenizer, BytesAfterTheLastTokenAreCountedAndExplained) {
  const TempDir dir;
  FileBytes f;
  f.i32(8);
  f.token(0.0f, "<unk>");
  f.token(0.0f, "<s>");
  f.token(0.0f, "</s>");
  FileBytes garbage = f;
  garbage.bytes += "\x01\x02\x03\x04\x05";
  expect_input_error([&] { (void)Llama2cTokenizer::load(garbage.save(dir, "garbage.bin"), 3); },
                     {"has 5 bytes left after the last of its 3 tokens (the model's vocab_size)",
                      "expected the file to end there", "not whole token records"});
  expect_input_error([&] { (void)Llama2cTokenizer::load(f.save(dir, "three.bin"), 2); },
                     {"has 12 bytes left after the last of its 2 tokens",
                      "1 more token:", "3-token vocabulary", "belongs to a different model"});
}

// std::ifstream opens all of these: a directory then failed inside the stream with "Is a
// directory", a FIFO blocked for a writer, and /dev/zero was read until memory ran out.
TEST(Tokenizer, PathsThatAreNotRegularFilesAreRejectedWithoutReading) {
  const TempDir dir;
  const std::string folder = dir.write("x", "");
  fs::remove(folder);
  fs::create_directory(folder);
  expect_input_error([&] { (void)Llama2cTokenizer::load(folder, 3); },
                     {"tokenizer '" + folder + "' is a directory, not a regular file",
                      "expected a llama2.c tokenizer.bin"});
  const std::string fifo = folder + ".fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_input_error([&] { (void)Llama2cTokenizer::load(fifo, 3); },
                     {"is a FIFO (named pipe), not a regular file"});
  fs::remove(fifo);
  if (fs::exists("/dev/zero")) {
    expect_input_error([] { (void)Llama2cTokenizer::load("/dev/zero", 3); },
                       {"'/dev/zero' is a character device, not a regular file"});
  }
}

TEST(Tokenizer, FilesOverOneGibibyteAreRejectedBeforeReading) {
  const TempDir dir;
  const std::string path = dir.write("huge.bin", "");
  fs::resize_file(path, (std::uintmax_t{1} << 30) + 1);  // sparse: no disk space, no reading
  expect_input_error(
      [&] { (void)Llama2cTokenizer::load(path, 3); },
      {"is 1073741825 bytes, over the 1073741824-byte limit", "expected a llama2.c tokenizer.bin"});
}

}  // namespace
}  // namespace kvheap
