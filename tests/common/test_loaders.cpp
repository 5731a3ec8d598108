// Tests for the llama2.c loader: the real stories260K checkpoint, round trips of both formats, and
// every way a header can lie about the file behind it. Malformed cases check the message text,
// because "the message names the problem" is part of the loader's contract.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "base/error.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/util/mapped_file.hpp"
#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

using test::input_error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A small GQA model (4 query heads over 2 KV heads, head_dim 16) in llama2.c conventions.
ModelConfig tiny_config(bool tied = true) {
  ModelConfig c = preset("tiny");
  c.tied_embeddings = tied;
  return c;
}

// Seven little-endian int32 header fields, as a legacy (version 0) file starts.
std::string v0_header(std::initializer_list<std::int32_t> fields) {
  std::string out;
  for (std::int32_t f : fields) out.append(reinterpret_cast<const char*>(&f), 4);
  return out;
}

void set_i32(std::string& bytes, std::size_t offset, std::int32_t v) {
  std::memcpy(bytes.data() + offset, &v, 4);
}

TEST(Llama2cLoader, Stories260KLoadsWithItsPublishedShape) {
  KVHEAP_REQUIRE_MODEL(path, "stories260K.bin");
  const ModelWeights w = load_llama2c(path);
  const ModelConfig& c = w.config;
  EXPECT_EQ(c.name, "stories260K");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::Interleaved);
  EXPECT_EQ(w.classifier, w.token_embedding);
  ASSERT_EQ(w.layers.size(), 5u);
  EXPECT_EQ(std::filesystem::file_size(path), llama2c_file_size(c, 0));
  // This model's trained RMSNorm gains are all positive (0.36 .. 4.4) while its matrices mix signs,
  // so a wrong offset anywhere in the tensor walk would land a norm on matrix data and fail here.
  auto all_positive = [&](const float* gain) {
    for (int i = 0; i < c.dim; ++i)
      if (!(gain[i] > 0.0f && std::isfinite(gain[i]))) return false;
    return true;
  };
  for (const LayerWeights& L : w.layers) {
    EXPECT_TRUE(all_positive(L.attn_norm));
    EXPECT_TRUE(all_positive(L.ffn_norm));
  }
  EXPECT_TRUE(all_positive(w.final_norm));
}

TEST(Llama2cLoader, FileSizeFollowsFromTheHeader) {
  const ModelConfig c = preset("stories260k");
  // 28-byte header + 4 x (embedding 512x64 + 5 layers x 45440 + final norm 64 + RoPE 2x512x4).
  EXPECT_EQ(llama2c_file_size(c, 0), 1056540u);
  // Version 1: 256-byte header and no RoPE tables.
  EXPECT_EQ(llama2c_file_size(c, 1), 256u + 4u * (32768u + 5u * 45440u + 64u));
  ModelConfig untied = c;
  untied.tied_embeddings = false;
  EXPECT_EQ(llama2c_file_size(untied, 0), 1056540u + 4u * 512u * 64u);
}

TEST(Llama2cLoader, V0AndV1OfTheSameWeightsLoadToIdenticalTensors) {
  const test::TempDir tmp;
  const ModelWeights want = test::random_weights(tiny_config(), 7);
  test::write_llama2c(want, tmp.file("m0.bin"), 0);
  test::write_llama2c(want, tmp.file("m1.bin"), 1);
  const ModelWeights v0 = load_llama2c(tmp.file("m0.bin"));
  const ModelWeights v1 = load_llama2c(tmp.file("m1.bin"));
  test::expect_same_tensors(v0, want);
  test::expect_same_tensors(v1, want);
  EXPECT_EQ(v0.config.name, "m0");
  EXPECT_EQ(v0.config.head_dim, 16);
  EXPECT_EQ(v1.config.n_kv_heads, 2);
  EXPECT_TRUE(v0.config.tied_embeddings && v1.config.tied_embeddings);
}

TEST(Llama2cLoader, UnsharedClassifierLoadsInBothFormats) {
  const test::TempDir tmp;
  const ModelWeights want = test::random_weights(tiny_config(/*tied=*/false), 11);
  for (int version : {0, 1}) {
    SCOPED_TRACE(version);
    const std::string path = tmp.file(fmt::format("untied{}.bin", version));
    test::write_llama2c(want, path, version);
    if (version == 0) {
      std::int32_t vocab = 0;  // version 0 signals the separate classifier with a negative vocab
      std::memcpy(&vocab, test::read_bytes(path).data() + 20, 4);
      EXPECT_EQ(vocab, -128);
    }
    const ModelWeights got = load_llama2c(path);
    EXPECT_FALSE(got.config.tied_embeddings);
    EXPECT_EQ(got.config.vocab_size, 128);
    EXPECT_NE(got.classifier, got.token_embedding);
    test::expect_same_tensors(got, want);
  }
}

TEST(Llama2cLoader, TruncatedV0FileNamesBothSizes) {
  const test::TempDir tmp;
  const std::string path = tmp.file("cut.bin");
  test::write_llama2c(test::random_weights(tiny_config(), 1), path, 0);
  const auto expected = llama2c_file_size(tiny_config(), 0);
  test::write_bytes(path, test::read_bytes(path).substr(0, 4096));
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }),
              AllOf(HasSubstr("truncated"), HasSubstr(fmt::format("expected {} bytes", expected)),
                    HasSubstr("found 4096"), HasSubstr("dim 64"), HasSubstr(path)));
}

TEST(Llama2cLoader, TruncatedV1FileIsRejected) {
  const test::TempDir tmp;
  const std::string path = tmp.file("cut1.bin");
  test::write_llama2c(test::random_weights(tiny_config(), 2), path, 1);
  const std::string full = test::read_bytes(path);
  test::write_bytes(path, full.substr(0, full.size() - 1));  // one float byte short
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }),
              AllOf(HasSubstr("truncated"), HasSubstr(fmt::format("found {}", full.size() - 1)),
                    HasSubstr("version 1")));
  test::write_bytes(path, full.substr(0, 100));  // the magic survives, the header does not
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }),
              AllOf(HasSubstr("version 1 header needs 256 bytes"), HasSubstr("found 100")));
}

TEST(Llama2cLoader, V1UnsupportedVersionIsNamed) {
  const test::TempDir tmp;
  const std::string path = tmp.file("v2.bin");
  test::write_llama2c(test::random_weights(tiny_config(), 3), path, 1);
  std::string bytes = test::read_bytes(path);
  for (std::int32_t version : {2, 7, -1}) {
    set_i32(bytes, 4, version);
    test::write_bytes(path, bytes);
    EXPECT_THAT(
        input_error_of([&] { return load_llama2c(path); }),
        AllOf(HasSubstr(fmt::format("format version {}", version)), HasSubstr("version 1 (fp32)")));
  }
}

TEST(Llama2cLoader, WrongMagicAndGarbageV0HeadersFailValidationCleanly) {
  const test::TempDir tmp;
  const std::string path = tmp.file("bad.bin");
  test::write_llama2c(test::random_weights(tiny_config(), 4), path, 1);
  std::string bytes = test::read_bytes(path);
  bytes[0] = 'x';  // no longer "ak42", so the file reads as a legacy header starting with dim
  test::write_bytes(path, bytes);
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }),
              AllOf(HasSubstr("invalid model config"), HasSubstr("dim must be in")));

  // Bytes that are plainly not a header: every field is checked before anything is sized.
  test::write_bytes(path, std::string(4096, '\xa5'));
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }),
              HasSubstr("invalid model config"));
  test::write_bytes(path, v0_header({64, 172, 5, 8, 4, 512, -3}) + std::string(64, '\0'));
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }), HasSubstr("max_seq_len"));
}

TEST(Llama2cLoader, HeaderPromisingMoreBytesThanTheFileIsAnErrorNotAnOverread) {
  const test::TempDir tmp;
  const std::string path = tmp.file("promise.bin");
  // A Llama-2-7B-shaped header in front of 4 KB: tens of gigabytes promised.
  test::write_bytes(
      path, v0_header({4096, 11008, 32, 32, 32, 32000, 4096}) + std::string(4096 - 28, '\0'));
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }),
              AllOf(HasSubstr("truncated"), HasSubstr("found 4096"), HasSubstr("dim 4096"),
                    HasSubstr("n_layers 32")));
}

TEST(Llama2cLoader, HeadsThatDoNotDivideAreRejected) {
  const test::TempDir tmp;
  const std::string path = tmp.file("heads.bin");
  test::write_bytes(path, v0_header({64, 172, 5, 8, 3, 512, 512}));
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }),
              AllOf(HasSubstr("n_heads (8) must be divisible by n_kv_heads (3)"), HasSubstr(path)));
  test::write_bytes(path, v0_header({64, 172, 5, 6, 6, 512, 512}));
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }),
              HasSubstr("dim (64) must be divisible by n_heads (6)"));
}

TEST(Llama2cLoader, AbsurdSizesAreRejectedBeforeAnyAllocation) {
  const test::TempDir tmp;
  const std::string path = tmp.file("huge.bin");
  // Only the 28-byte header exists; sizing anything from these values would be the bug.
  test::write_bytes(path, v0_header({1 << 30, 172, 5, 8, 4, 512, 512}));
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }),
              HasSubstr("dim must be in [1, 65536], got 1073741824"));
  test::write_bytes(path, v0_header({64, 172, 1 << 20, 8, 4, 512, 512}));
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }), HasSubstr("n_layers"));
  test::write_bytes(path, v0_header({64, 172, 5, 8, 4, INT32_MIN, 512}));
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }), HasSubstr("vocab_size"));
}

TEST(Llama2cLoader, TrailingBytesMeanTheHeaderIsWrong) {
  const test::TempDir tmp;
  const std::string path = tmp.file("long.bin");
  test::write_llama2c(test::random_weights(tiny_config(), 5), path, 0);
  test::write_bytes(path, test::read_bytes(path) + std::string(12, '\0'));
  EXPECT_THAT(input_error_of([&] { return load_llama2c(path); }),
              AllOf(HasSubstr("12 trailing bytes"), HasSubstr("header does not match")));
}

TEST(Llama2cLoader, MissingEmptyAndDirectoryPathsAreInputErrors) {
  const test::TempDir tmp;
  EXPECT_THAT(
      input_error_of([&] { return load_llama2c(tmp.file("nope.bin")); }),
      AllOf(HasSubstr("cannot open checkpoint"), HasSubstr("nope.bin"), HasSubstr("No such file")));
  EXPECT_THAT(input_error_of([&] { return load_llama2c(tmp.path().string()); }),
              HasSubstr("not a regular file"));
  test::write_bytes(tmp.file("empty.bin"), "");
  EXPECT_THAT(input_error_of([&] { return load_llama2c(tmp.file("empty.bin")); }),
              AllOf(HasSubstr("truncated"), HasSubstr("found 0")));
}

TEST(MappedFile, MapsWholeFilesAndEmptyOnes) {
  const test::TempDir tmp;
  test::write_bytes(tmp.file("abc"), "abc");
  test::write_bytes(tmp.file("empty"), "");
  MappedFile f(tmp.file("abc"));
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(std::memcmp(f.data(), "abc", 3), 0);
  EXPECT_EQ(f.path(), tmp.file("abc"));
  const MappedFile moved = std::move(f);
  EXPECT_EQ(moved.size(), 3u);
  const MappedFile e(tmp.file("empty"));
  EXPECT_EQ(e.size(), 0u);
  EXPECT_EQ(e.data(), nullptr);
}

// A FIFO where a checkpoint belongs (a folder's model.safetensors, say) was once opened for a
// blocking read, which waits forever for a writer. It, a device and a directory are each named
// for what they are instead.
TEST(MappedFile, FifosDevicesAndDirectoriesAreRejectedWithoutBlocking) {
  const test::TempDir tmp;
  const std::string fifo = tmp.file("model.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(input_error_of([&] { return MappedFile(fifo); }),
              HasSubstr("checkpoint '" + fifo + "' is a FIFO (named pipe), not a regular file"));
  EXPECT_THAT(input_error_of([&] { return MappedFile(tmp.path().string()); }),
              HasSubstr("is a directory, not a regular file"));
  if (std::filesystem::exists("/dev/zero")) {
    EXPECT_THAT(input_error_of([] { return MappedFile("/dev/zero"); }),
                HasSubstr("'/dev/zero' is a character device, not a regular file"));
  }
}

}  // namespace
}  // namespace kvheap
