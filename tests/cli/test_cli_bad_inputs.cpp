// Bad inputs at the program level: every malformed file, flag or resource request that
// docs/pages/bad_inputs.md lists gets one line on stderr naming the problem and exit code 2
// (usage) or 1 (input, resource), never a crash. Part of the test_cli program.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
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

/// A Hugging Face folder (config.json + model.safetensors) of the tiny preset, inside `tmp`.
std::string write_tiny_hf_folder(const test::TempDir& tmp) {
  ModelConfig c = preset("tiny");
  c.rope_style = RopeStyle::Halves;  // the convention Hugging Face checkpoints use
  const std::string dir = tmp.file("tiny-hf");
  test::write_safetensors(test::random_weights(c, 4), dir);
  return dir;
}

TEST(Cli, SafetensorsShapeMismatchExitsOne) {
  const test::TempDir tmp;
  const std::string dir = write_tiny_hf_folder(tmp);
  test::edit_safetensors_header(dir + "/model.safetensors", [](nlohmann::json& h) {
    h["model.layers.1.mlp.down_proj.weight"]["shape"] = {160, 64};
  });
  const auto r = run_program(kCh01, {"--model", dir, "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "has shape [160, 64], expected [64, 160]");
}

// A Llama folder labelled Qwen3 lacks the per-head norms; a Qwen3 folder whose k_norm has the
// wrong length has the wrong model. Both name the tensor and the shape it should have.
TEST(Cli, Qwen3FolderWithoutOrWithMisshapenQkNormsExitsOne) {
  const test::TempDir tmp;
  const std::string llama = write_tiny_hf_folder(tmp);
  test::edit_json_file(llama + "/config.json",
                       [](nlohmann::json& j) { j["model_type"] = "qwen3"; });
  const auto missing = run_program(kCh01, {"--model", llama, "--no-peak"});
  EXPECT_EQ(missing.exit_code, 1);
  expect_one_line_error(missing,
                        "missing tensor 'model.layers.0.self_attn.q_norm.weight' (expected shape "
                        "[16]; model_type qwen3 normalises every head of q and k");

  const std::string qwen3 = tmp.file("tiny-qwen3");
  test::write_safetensors(test::random_weights(test::tiny_qwen3_config(), 4), qwen3);
  test::edit_safetensors_header(qwen3 + "/model.safetensors", [](nlohmann::json& h) {
    h["model.layers.1.self_attn.k_norm.weight"]["shape"] = {64};
  });
  const auto misshapen = run_program(kCh01, {"--model", qwen3, "--no-peak"});
  EXPECT_EQ(misshapen.exit_code, 1);
  expect_one_line_error(misshapen, "tensor 'model.layers.1.self_attn.k_norm.weight' in '" + qwen3 +
                                       "/model.safetensors' has shape [64], expected [32]");
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
  // 10^12 MB is an exabyte: no host has it. (Infinity is not a budget at all: exit 2, below.)
  const auto r = run_program(kCh01, {"--model", "tiny", "--kv-budget-mb", "1e12", "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r,
                        "--kv-budget-mb 1000000000000 asks for more than this host's "
                        "physical memory (");
  expect_one_line_error(r, " MB)");
}

TEST(Cli, KvBudgetThatIsNotANumberExitsTwo) {
  for (const char* mb : {"nan", "inf", "-1", "lots"}) {
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

// std::ifstream opens directories, FIFOs and devices alike: /dev/zero was read until memory ran
// out, a FIFO waited forever for a writer, and a directory ended in an internal error.
TEST(Cli, TokenizerThatIsNotARegularFileExitsOne) {
  const test::TempDir tmp;
  const std::string fifo = tmp.file("tok.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::vector<std::string> paths = {fifo};
  if (std::filesystem::exists("/dev/zero")) paths.emplace_back("/dev/zero");
  for (const std::string& path : paths) {
    const auto r =
        run_program(kCh01, {"--model", "tiny", "--tokenizer", path, "--prompt", "hi", "--no-peak"});
    EXPECT_EQ(r.exit_code, 1) << path;
    expect_one_line_error(r, "tokenizer '" + path + "' is a");
    expect_one_line_error(r, "not a regular file; expected a llama2.c tokenizer.bin");
  }
  // A folder is searched for a tokenizer.json or a tiktoken file.
  const auto r = run_program(kCh01, {"--model", "tiny", "--tokenizer", tmp.path().string(),
                                     "--prompt", "hi", "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r,
                        "tokenizer folder '" + tmp.path().string() + "' holds no tokenizer.json");
}

// The same for --model: a FIFO or a device is named as such, not as a missing file.
TEST(Cli, ModelThatIsAFifoOrADeviceExitsOne) {
  const test::TempDir tmp;
  const std::string fifo = tmp.file("model.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::vector<std::string> paths = {fifo};
  if (std::filesystem::exists("/dev/null")) paths.emplace_back("/dev/null");
  for (const std::string& path : paths) {
    const auto r = run_program(kCh01, {"--model", path, "--no-peak"});
    EXPECT_EQ(r.exit_code, 1) << path;
    expect_one_line_error(r, "--model '" + path + "' is a");
    expect_one_line_error(r, "not a regular file");
  }
}

TEST(Cli, ModelFolderWhoseConfigIsADirectoryExitsOne) {
  const test::TempDir tmp;
  const std::string dir = write_tiny_hf_folder(tmp);
  std::filesystem::remove(dir + "/config.json");
  std::filesystem::create_directory(dir + "/config.json");
  const auto r = run_program(kCh01, {"--model", dir, "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "config.json' is a directory, not a regular file");
}

// Infinity and 1e15 GB once printed "sequences that fit: -9223372036854775808".
TEST(Cli, KvCalculatorMemoryMustBeFiniteAndBelowAPetabyteExitsTwo) {
  for (const char* gb : {"inf", "1e15", "nan", "0"}) {
    const auto r = run_program("ch01_kv_calculator", {"--memory-gb", gb});
    EXPECT_EQ(r.exit_code, 2) << "--memory-gb " << gb;
    expect_one_line_error(r, "--memory-gb must be a finite number in (0, 1000000] (a petabyte)");
  }
}

// 0 once meant "use the default" without saying so.
TEST(Cli, KvCalculatorExplicitZeroContextExitsTwo) {
  const auto r = run_program("ch01_kv_calculator", {"--model", "tiny", "--context", "0"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "--context must be in [1, max_seq_len = 96], got 0");
}

// The default was max_seq_len / 4, which is 0 below 4 positions and was then reported as a bad
// --context the user never passed.
TEST(Cli, KvCalculatorDefaultContextSuitsAModelOfTwoPositions) {
  const test::TempDir tmp;
  ModelConfig c = preset("tiny");
  c.max_seq_len = 2;
  const std::string path = tmp.file("short.bin");
  test::write_llama2c(test::random_weights(c, 3), path, 1);
  const auto r = run_program("ch01_kv_calculator", {"--model", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cache per sequence at 1 tokens"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kvheap
