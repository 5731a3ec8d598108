// Bad inputs at the program level: every malformed file, flag or resource request that
// docs/pages/bad_inputs.md lists gets one line on stderr naming the problem and exit code 2
// (usage) or 1 (input, resource), never a crash. Part of the test_cli program.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/run_program.hpp"

namespace kvheap {
namespace {

using test::expect_one_line_error;
using test::run_program;

const char* kCh01 = "ch01_cpu_reference";

// The tiny preset as a llama2.c v1 checkpoint, for tests that then break one thing in it.
std::string tiny_checkpoint(const test::TempDir& tmp) {
  std::string path = tmp.file("tiny.bin");
  test::write_llama2c(test::random_weights(preset("tiny"), 3), path, 1);
  return path;
}

TEST(Cli, TruncatedCheckpointExitsOne) {
  const test::TempDir tmp;
  const std::string path = tiny_checkpoint(tmp);
  test::write_bytes(path, test::read_bytes(path).substr(0, 4096));
  const auto r = run_program(kCh01, {"--model", path, "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "truncated: expected");
  expect_one_line_error(r, "found 4096");
}

TEST(Cli, UnsupportedCheckpointVersionExitsOne) {
  const test::TempDir tmp;
  const std::string path = tiny_checkpoint(tmp);
  std::string bytes = test::read_bytes(path);
  bytes[4] = 2;  // the version field after "ak42": int8-quantized version 2
  test::write_bytes(path, bytes);
  const auto r = run_program(kCh01, {"--model", path, "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "format version 2");
}

TEST(Cli, HeadsThatDoNotDivideExitOne) {
  const test::TempDir tmp;
  const std::string path = tmp.file("heads.bin");
  // A legacy header only: dim 64 over 6 heads leaves a remainder.
  const std::int32_t header[7] = {64, 172, 5, 6, 6, 512, 512};
  test::write_bytes(path, std::string(reinterpret_cast<const char*>(header), sizeof header));
  const auto r = run_program(kCh01, {"--model", path, "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "dim (64) must be divisible by n_heads (6)");
}

TEST(Cli, SafetensorsShapeMismatchExitsOne) {
  const test::TempDir tmp;
  ModelConfig c = preset("tiny");
  c.rope_style = RopeStyle::Halves;
  const std::string dir = tmp.file("tiny-hf");
  test::write_safetensors(test::random_weights(c, 4), dir);
  test::edit_safetensors_header(dir + "/model.safetensors", [](nlohmann::json& h) {
    h["model.layers.1.mlp.down_proj.weight"]["shape"] = {160, 64};
  });
  const auto r = run_program(kCh01, {"--model", dir, "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "has shape [160, 64], expected [64, 160]");
}

TEST(Cli, TokenizerOfTheWrongSizeExitsOne) {
  // Three tokens where the tiny model has 128; needs no real checkpoint, unlike the test above.
  const test::TempDir tmp;
  std::string bytes(4, '\0');
  for (const std::string piece : {"<unk>", "<s>", "</s>"}) {
    const float score = 0.0f;
    const auto len = static_cast<std::int32_t>(piece.size());
    bytes.append(reinterpret_cast<const char*>(&score), 4);
    bytes.append(reinterpret_cast<const char*>(&len), 4);
    bytes += piece;
  }
  test::write_bytes(tmp.file("tok.bin"), bytes);
  const auto r = run_program(kCh01, {"--model", "tiny", "--tokenizer", tmp.file("tok.bin"),
                                     "--prompt", "hi", "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "holds only 3 tokens but the model's vocab_size is 128");
}

TEST(Cli, EmptyPromptIdsExitTwo) {
  for (const char* ids : {"", " "}) {
    const auto r = run_program(kCh01, {"--model", "tiny", "--prompt-ids", ids, "--no-peak"});
    EXPECT_EQ(r.exit_code, 2) << "--prompt-ids '" << ids << "'";
    expect_one_line_error(r, "--prompt-ids: the list is empty");
  }
}

TEST(Cli, PromptLongerThanTheContextExitsOne) {
  std::string ids = "1";
  for (int i = 1; i < 97; ++i) ids += ",5";  // 97 tokens; tiny holds 96 positions
  const auto r = run_program(kCh01, {"--model", "tiny", "--prompt-ids", ids, "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "the prompt has 97 tokens but the model's context holds 96");
}

TEST(Cli, KvBudgetAboveHostMemoryExitsOne) {
  // 10^12 MB is an exabyte: no host has it. Infinity is refused the same way.
  for (const char* mb : {"1e12", "inf"}) {
    const auto r = run_program(kCh01, {"--model", "tiny", "--kv-budget-mb", mb, "--no-peak"});
    EXPECT_EQ(r.exit_code, 1) << "--kv-budget-mb " << mb;
    expect_one_line_error(r, "asks for more than this host's physical memory (");
    expect_one_line_error(r, " MB)");
  }
  const auto r = run_program(kCh01, {"--model", "tiny", "--kv-budget-mb", "1e12", "--no-peak"});
  expect_one_line_error(r, "--kv-budget-mb 1000000000000 asks for more");
}

TEST(Cli, KvBudgetThatIsNotANumberExitsTwo) {
  for (const char* mb : {"nan", "-1", "lots"}) {
    const auto r = run_program(kCh01, {"--model", "tiny", "--kv-budget-mb", mb, "--no-peak"});
    EXPECT_EQ(r.exit_code, 2) << "--kv-budget-mb " << mb;
    expect_one_line_error(r, "--kv-budget-mb");
  }
}

TEST(Cli, AbsurdThreadCountExitsTwo) {
  // 100000 was once a segmentation fault inside libgomp, when the program measured its peak.
  auto r = run_program(kCh01, {"--model", "tiny", "--threads", "100000"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "--threads 100000 is more than 16 per core");
  r = run_program(kCh01, {"--model", "tiny", "--threads", "-1"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "--threads must be >= 0, got -1");
}

}  // namespace
}  // namespace kvheap
