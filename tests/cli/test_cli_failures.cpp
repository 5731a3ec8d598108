// Runs that cannot do what was asked say so and exit non-zero, and runs that can do it do not
// hang: requests with nothing to generate, arrivals far in the future, a pool past the host's
// memory, requests turned away, output that cannot be written, token ids out of range. Every
// case is a row of docs/pages/bad_inputs.md. Part of the test_cli program.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/measure/bandwidth.hpp"
#include "common/model/model_config.hpp"
#include "common/model/weights.hpp"
#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/run_program.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

using test::expect_one_line_error;
using test::run_program;

const std::vector<std::string>& kChapters = test::kChapterPrograms;

/// A folder of this test program's own, removed when it ends: concurrent runs do not collide.
const test::TempDir& scratch() {
  static const test::TempDir dir;
  return dir;
}

/// Writes `lines` to a workload file in scratch() and returns its path.
std::string workload(const std::string& name, const std::vector<std::string>& lines) {
  return test::write_lines(scratch().file(name + ".jsonl"), lines);
}

std::vector<std::string> tiny(std::vector<std::string> args, const std::string& model = "tiny") {
  args.insert(args.begin(), {"--model", model, "--no-peak", "--device", "cpu"});
  return args;
}

// Requests with nothing to generate finish on arrival, beside ones that run, in every chapter
// (chapter 4 once failed describing them; chapter 5 once numbered the rest wrong).
TEST(Cli, RequestsWithNoNewTokensAreServedBesideOthersInEveryChapter) {
  const std::string w =
      workload("zero_tokens", {R"({"prompt_ids": [1, 2, 3], "max_new_tokens": 0})",
                               R"({"prompt_ids": [1, 5], "max_new_tokens": 3})",
                               R"({"prompt_ids": [1, 7], "max_new_tokens": 0})"});
  for (const std::string& chapter : kChapters) {
    std::vector<std::string> args = tiny({"--workload", w, "--json", "--ignore-eos"});
    if (chapter == "ch04_cow_prefix_sharing") args.insert(args.end(), {"--samples", "1"});
    const auto r = run_program(chapter, args);
    ASSERT_EQ(r.exit_code, 0) << chapter << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["serving"]["generated_tokens"], 3) << chapter;
  }
  const auto r = run_program("ch04_cow_prefix_sharing",
                             tiny({"--prompt-ids", "1,2", "--max-new-tokens", "0"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("0 generated (max_new_tokens)"), std::string::npos) << r.out;
}

// An arrival past a day is refused at parse time, naming the line and the bound, in every
// chapter that reads workloads; before, the loop slept until it (1e6 s) or spun forever (1e308).
TEST(Cli, ArrivalsMoreThanADayAwayAreRefused) {
  for (const char* at : {"1e308", "1e6", "86400.5"}) {
    const std::string w = workload(
        "far", {std::string(R"({"prompt_ids": [1, 2, 3], "max_new_tokens": 4, "arrival_s": )") +
                at + "}"});
    for (const std::string& chapter : kChapters) {
      const auto r = run_program(chapter, tiny({"--workload", w}));
      EXPECT_EQ(r.exit_code, 1) << chapter << " " << at;
      expect_one_line_error(r, "line 1: 'arrival_s' is ");
      expect_one_line_error(r, "an arrival must be at most 86400 s (a day)");
    }
  }
}

// A wait for a late arrival says what it waits for (when 3 s or more are left: at 4.5 s, the run
// may take 1.5 s to start waiting).
TEST(Cli, WaitingForALateArrivalSaysSo) {
  const std::string w =
      workload("late", {R"({"prompt_ids": [1, 2, 3], "max_new_tokens": 2, "arrival_s": 4.5})"});
  const auto r = run_program("ch03_paged_blocks", tiny({"--workload", w}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("waiting for request 0, which arrives at 4.5 s"), std::string::npos)
      << r.err;
}

// A pool larger than the memory the host has left is refused before it is committed (the run
// was killed by the kernel, or swapped for minutes, before).
TEST(Cli, PoolPastTheHostsAvailableMemoryExitsOne) {
  // Twice the host's memory, at least a terabyte, under the pool's cap of 2^30 blocks (tiny: 8 KiB
  // a block of 16): never a pool the host could hold.
  const double mb =
      std::min(8e6, std::max(1e6, 2.0 * static_cast<double>(physical_memory_bytes()) / 1e6));
  for (const char* chapter :
       {"ch03_paged_blocks", "ch04_cow_prefix_sharing", "ch05_batched_scheduler"}) {
    const auto r = run_program(
        chapter, tiny({"--prompt-ids", "1,2", "--kv-budget-mb", fmt::format("{:.0f}", mb)}));
    EXPECT_EQ(r.exit_code, 1) << chapter;
    expect_one_line_error(r, "MB, more than this host's available memory (");
  }
}

// On the device a pool is checked against cudaMemGetInfo before it is allocated: here the
// simulator's device, made 16 MB for the test (KVHEAP_SIM_DEVICE_MEMORY_MB), and the budget's pool
// of chapters 3-5 (chapter 2 allocates a reservation per request, not the budget).
TEST(Cli, PoolPastTheDevicesFreeMemoryExitsOne) {
  if (std::string(KVHEAP_CUDA_MODE) != "sim") GTEST_SKIP() << "the simulator's device memory";
  const test::ScopedEnv small("KVHEAP_SIM_DEVICE_MEMORY_MB", "16");
  for (const char* chapter :
       {"ch03_paged_blocks", "ch04_cow_prefix_sharing", "ch05_batched_scheduler"}) {
    const auto r = run_program(chapter, {"--model", "tiny", "--no-peak", "--device", "cuda",
                                         "--prompt-ids", "1,2", "--kv-budget-mb", "64"});
    EXPECT_EQ(r.exit_code, 1) << chapter;
    expect_one_line_error(r, "exceeds the device's free memory (");
  }
}

// Requests turned away: the report still prints, and the run exits 1 with one line saying how
// many and why (chapter 4 exited 0 after "0 served").
TEST(Cli, RequestsTurnedAwayExitOne) {
  const auto r = run_program("ch04_cow_prefix_sharing",
                             tiny({"--prompt-ids", "1,2", "--num-seqs", "2", "--max-new-tokens",
                                   "90", "--kv-budget-mb", "0.05"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("0 served, 8 not admitted"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  EXPECT_NE(r.err.find("8 of 8 requests not admitted: request 0 not admitted: its 4 samples need"),
            std::string::npos)
      << r.err;
}

// A block longer than the model's context is a bad flag in every paged chapter (chapter 3 once
// reported figures for 0.2 blocks per sequence; chapter 4 turned every request away).
TEST(Cli, BlockSizeAboveMaxSeqLenExitsTwo) {
  for (const char* chapter :
       {"ch03_paged_blocks", "ch04_cow_prefix_sharing", "ch05_batched_scheduler"}) {
    const auto r = run_program(chapter, tiny({"--prompt-ids", "1,2", "--block-size", "97"}));
    EXPECT_EQ(r.exit_code, 2) << chapter;
    expect_one_line_error(r, "--block-size 97 is more than the model's max_seq_len of 96");
  }
}

// Output that never reaches its file is a failure: stdout on a full disk, a pool map that
// cannot be written, and an empty --pool-map.
TEST(Cli, OutputThatCannotBeWrittenExitsOne) {
  for (const std::string& chapter : kChapters) {
    const auto r = run_program(chapter, tiny({"--prompt-ids", "1,2", "--json"}), "/dev/full");
    EXPECT_EQ(r.exit_code, 1) << chapter;
    expect_one_line_error(r, "cannot write the output to stdout: No space left on device");
  }
  const auto map =
      run_program("ch03_paged_blocks", tiny({"--prompt-ids", "1,2", "--pool-map", "/dev/full"}));
  EXPECT_EQ(map.exit_code, 1);
  EXPECT_NE(map.err.find("--pool-map: cannot write '/dev/full': No space left on device"),
            std::string::npos)
      << map.err;
  const auto empty =
      run_program("ch03_paged_blocks", tiny({"--prompt-ids", "1,2", "--pool-map", ""}));
  EXPECT_EQ(empty.exit_code, 2);
  expect_one_line_error(empty, "--pool-map: the value is empty; expected a file name");
}

// One flag, one exit code: an id past the vocabulary exits 2 however large it is; the same ids
// in a --prompts file are bad file content (1), named with the file and the line.
TEST(Cli, TokenIdsOutOfRangeExitAlikeAndNameTheirFileLine) {
  for (const char* ids : {"1,128", "1,2147483648", "1,99999999999999999999", "1,-3"}) {
    const auto r = run_program("ch01_cpu_reference", tiny({"--prompt-ids", ids}));
    EXPECT_EQ(r.exit_code, 2) << ids;
    expect_one_line_error(r, "is out of range: the model's vocabulary has 128 tokens (ids 0..127)");
  }
  const std::string path = scratch().file("ids.txt");
  std::ofstream(path) << "1,2\n1,2147483648\n";
  const auto r = run_program("ch01_cpu_reference", tiny({"--prompts", path}));
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "--prompts '" + path + "' line 2: element 2 ('2147483648') is out of");
}

// A --prompts line that cannot be ids: words get a hint about the tokenizer, and a huge or binary
// line is quoted short and escaped (a 10 MB line once gave a 10 MB message, and a NUL cut it).
TEST(Cli, BadPromptsLinesAreQuotedShortWithAHint) {
  const std::string words = scratch().file("words.txt");
  std::ofstream(words) << "Once upon a time\n";
  const auto r = run_program("ch01_cpu_reference", tiny({"--prompts", words}));
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "line 1: element 1 ('Once upon a time') is not an integer");
  expect_one_line_error(r, "a line of text needs a tokenizer: --tokenizer");
  const std::string junk = scratch().file("junk.txt");
  std::string line(1 << 20, 'x');
  line[3] = '\0';
  line[4] = '\x1b';
  std::ofstream(junk, std::ios::binary) << "1,2\n" << line << "\n";
  const auto j = run_program("ch01_cpu_reference", tiny({"--prompts", junk}));
  EXPECT_EQ(j.exit_code, 1);
  expect_one_line_error(j, "line 2: element 1 ('xxx\\x00\\x1bxxx");
  expect_one_line_error(j, "' (its first 60 of 1048576 bytes)) is not an integer");
  EXPECT_LT(j.err.size(), 400u);
}

// A non-finite weight is found at load, naming the file and the tensor (it once surfaced as
// "logit 0 of 512 is NaN" after the first forward pass).
TEST(Cli, NonFiniteWeightIsNamedAtLoad) {
  const test::TempDir tmp;
  const std::string path = tmp.file("nan.bin");
  ModelWeights w = test::random_weights(preset("tiny"), 3);
  const_cast<float*>(w.layers[1].wk)[2 * w.config.dim + 5] = std::nanf("");
  test::write_llama2c(w, path, 1);
  const auto r = run_program("ch01_cpu_reference", tiny({"--prompt-ids", "1,2"}, path));
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r,
                        "nan.bin': weight tensor layers.1.wk [32 x 64] holds NaN at row 2, "
                        "column 5");
}

// A config.json without model_type is refused rather than read as llama's; a tokenizer.json that
// opens with a byte-order mark, or holds JSON that is not an object, is answered by the JSON
// reader (both were read as a llama2.c tokenizer.bin).
TEST(Cli, FilesThatSayWhatTheyAreAreReadAsThat) {
  const test::TempDir tmp;
  ModelConfig c = preset("tiny");
  c.rope_style = RopeStyle::Halves;
  const std::string dir = tmp.file("tiny-hf");
  test::write_safetensors(test::random_weights(c, 4), dir);
  test::edit_json_file(dir + "/config.json", [](nlohmann::json& j) { j.erase("model_type"); });
  const auto untyped = run_program("ch01_cpu_reference", tiny({"--prompt-ids", "1"}, dir));
  EXPECT_EQ(untyped.exit_code, 1);
  expect_one_line_error(untyped, "config.json' has no model_type; expected one of llama");

  const std::string array = tmp.file("tokenizer.json");
  std::ofstream(array) << "[1, 2]";
  const auto r = run_program("ch01_cpu_reference", tiny({"--tokenizer", array, "--prompt", "hi"}));
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "tokenizer.json '" + array + "' must hold a JSON object, got array");
  const std::string bom = tmp.file("tokenizer-with-bom");  // no .json: the mark decides
  std::ofstream(bom) << "\xEF\xBB\xBF{\"model\": ";
  const auto b = run_program("ch01_cpu_reference", tiny({"--tokenizer", bom, "--prompt", "hi"}));
  EXPECT_EQ(b.exit_code, 1);
  expect_one_line_error(b, "tokenizer.json '" + bom + "' is not valid JSON");
}

// Messages that say what to do: a flag given twice, a budget below one block, a memory size
// below the weights (the calculator printed that and exited 0).
TEST(Cli, SmallMistakesAreNamedWithWhatToDo) {
  const auto twice =
      run_program("ch01_cpu_reference", tiny({"--max-new-tokens", "2", "--max-new-tokens", "3"}));
  EXPECT_EQ(twice.exit_code, 2);
  expect_one_line_error(twice, "--max-new-tokens is given 2 times; give it once");
  const auto budget =
      run_program("ch03_paged_blocks", tiny({"--prompt-ids", "1,2", "--kv-budget-mb", "0.0001"}));
  EXPECT_EQ(budget.exit_code, 1);
  expect_one_line_error(
      budget, "KV budget of 0.0001 MB does not hold one block of 16 tokens (0.008192 MB)");
  const auto memory = run_program("ch01_kv_calculator", {"--model", "tiny", "--memory-gb", "1e-6"});
  EXPECT_EQ(memory.exit_code, 1);
  EXPECT_NE(memory.err.find("--memory-gb 1e-06 does not even hold the weights ("),
            std::string::npos)
      << memory.err;
}

}  // namespace
}  // namespace kvheap
