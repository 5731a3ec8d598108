// Chapter 4's program: sharing changes what is computed and stored, never what is generated.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/run_program.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

using test::expect_flags_refused;
using test::run_program;

const char* kCh04 = "ch04_cow_prefix_sharing";

// Prompts that begin with the same blocks: chapter 4 computes the shared blocks once and still
// generates, greedily, exactly what chapter 3 generates computing every prompt in full.
TEST(Cli, Chapter4GeneratesChapter3sIdsWhilePromptsShareBlocks) {
  const std::vector<std::string> prompts = {"1,5,9,2,77,31,4,8", "1,5,9,2,77,31,4,8,60,61",
                                            "1,5,9,2,77,40", "1,70,71"};
  const test::TempDir tmp;
  const std::string file = tmp.file("prompts.txt");
  {
    std::ofstream f(file);
    for (const auto& p : prompts) f << p << "\n";
  }
  const std::vector<std::string> common = {
      "--model",       "tiny", "--prompts",    file, "--max-new-tokens", "15",
      "--temperature", "0",    "--block-size", "3",  "--json",           "--no-peak"};
  std::vector<std::string> args4 = common;
  args4.insert(args4.end(), {"--samples", "1"});
  const auto r4 = run_program(kCh04, args4);
  ASSERT_EQ(r4.exit_code, 0) << r4.err;
  const auto r3 = run_program("ch03_paged_blocks", common);
  ASSERT_EQ(r3.exit_code, 0) << r3.err;
  const auto j4 = nlohmann::json::parse(r4.out), j3 = nlohmann::json::parse(r3.out);
  EXPECT_EQ(j4["generated_ids"], j3["generated_ids"]);
  // Prompt 1 reuses prompt 0's two full blocks of 3 (6 positions), prompt 2 its first block.
  EXPECT_EQ(j4["sequences"][1]["prompt_tokens_reused"], 6);
  EXPECT_EQ(j4["sequences"][2]["prompt_tokens_reused"], 3);
  EXPECT_EQ(j4["sequences"][3]["prompt_tokens_reused"], 0);
  EXPECT_EQ(j4["sharing"]["prompt_positions_reused"], 9);
  EXPECT_EQ(j4["sharing"]["prompt_positions"], 8 + 10 + 6 + 3);
}

// Samples of one prompt are forks: greedy samples all equal chapter 1's single run, the prompt's
// full blocks are stored once, and each sample but the last to write copies the prompt's partly
// filled last block.
TEST(Cli, Chapter4SamplesAreForksThatCopyOnlyTheLastBlock) {
  const std::string prompt = "1,5,9,2,77,31,4,8,3,12";  // 10 positions: blocks of 4, 4 and 2
  const auto r = run_program(
      kCh04, {"--model", "tiny", "--prompt-ids", prompt, "--samples", "4", "--max-new-tokens", "12",
              "--temperature", "0", "--ignore-eos", "--block-size", "4", "--json", "--no-peak"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto ref = run_program("ch01_cpu_reference",
                               {"--model", "tiny", "--prompt-ids", prompt, "--max-new-tokens", "12",
                                "--temperature", "0", "--ignore-eos", "--json", "--no-peak"});
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const auto want = nlohmann::json::parse(ref.out)["generated_ids"];
  ASSERT_EQ(j["generated_ids"].size(), 4u);
  for (const auto& ids : j["generated_ids"]) EXPECT_EQ(ids, want);
  EXPECT_EQ(j["sharing"]["forks"], 3);
  EXPECT_EQ(j["sharing"]["copies_on_write"], 3);
  EXPECT_EQ(j["sharing"]["block_size"], 4);
  // The default budget is chapter 2's: 4 reservations of max_seq_len, cut in blocks of 4.
  const int max_seq_len = j["model_config"]["max_seq_len"];
  EXPECT_EQ(j["sharing"]["blocks_total"], 4 * max_seq_len / 4);
  // Each sample holds 10 + 12 - 1 = 21 positions: 6 blocks, 2 of them the shared prompt blocks.
  EXPECT_EQ(j["sharing"]["blocks_referenced"], 4 * 6);
  EXPECT_EQ(j["sharing"]["blocks_held"], 2 + 4 * 4);

  // Reading the shared prefix once per step changes the bytes read, not the tokens.
  const auto plain =
      run_program(kCh04, {"--model", "tiny", "--prompt-ids", prompt, "--samples", "4",
                          "--max-new-tokens", "12", "--temperature", "0", "--ignore-eos",
                          "--block-size", "4", "--json", "--no-peak", "--no-read-once"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto jp = nlohmann::json::parse(plain.out);
  EXPECT_EQ(jp["generated_ids"], j["generated_ids"]);
  EXPECT_EQ(jp["metrics"]["kv_bytes_per_step"], jp["sharing"]["kv_bytes_per_step_unshared"]);
  EXPECT_EQ(j["sharing"]["kv_bytes_per_step_unshared"],
            jp["sharing"]["kv_bytes_per_step_unshared"]);
  // Four rows share 8 positions: each step reads them once instead of four times.
  const double per_position = 512.0;  // tiny: bytes of K and V per position, all layers
  EXPECT_DOUBLE_EQ(j["sharing"]["kv_bytes_per_step_unshared"].get<double>() -
                       j["metrics"]["kv_bytes_per_step"].get<double>(),
                   3 * 8 * per_position);
  // One shared level, those 8 positions, read once a step; nothing read once without it.
  ASSERT_EQ(j["sharing"]["kv_bytes_per_step_by_level"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["sharing"]["kv_bytes_per_step_by_level"][0].get<double>(), 8 * per_position);
  EXPECT_TRUE(jp["sharing"]["kv_bytes_per_step_by_level"].empty());
}

// Sampled forks draw with their own seeds, as chapter 3's copies of a prompt do.
TEST(Cli, Chapter4SampledForksDiverge) {
  const auto r = run_program(
      kCh04, {"--model", "tiny", "--prompt-ids", "1,5,9", "--samples", "3", "--max-new-tokens",
              "20", "--temperature", "1", "--ignore-eos", "--json", "--no-peak"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto ids = nlohmann::json::parse(r.out)["generated_ids"];
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(ids[1], ids[2]);
}

TEST(Cli, Chapter4PromptsBeyondTheBudgetWaitForTheNextBatch) {
  // tiny: 512 B per token; 0.01 MB = 19 blocks of 1. A prompt of 1 with 8 new tokens stores 8
  // positions: with 2 samples, 1 + 2 x 7 = 15 blocks (the shared BOS block is stored once), so
  // the second prompt and its samples wait for the first batch to end.
  const auto r = run_program(kCh04, {"--model", "tiny", "--num-seqs", "2", "--samples", "2",
                                     "--max-new-tokens", "8", "--ignore-eos", "--block-size", "1",
                                     "--kv-budget-mb", "0.01", "--json", "--no-peak"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["not_admitted"].size(), 0u) << r.out;
  EXPECT_EQ(j["serving"]["peak_running"], 2);
  for (const auto& s : j["sequences"]) EXPECT_EQ(s["status"], "max_new_tokens") << r.out;
  EXPECT_GT(j["sequences"][2]["finish_step"].get<long>(),
            j["sequences"][0]["finish_step"].get<long>());
}

// The device cache (the simulator in a sim build) generates the CPU cache's ids, with the same
// sharing: the allocator is the same host code whatever holds the bytes.
TEST(Cli, Chapter4OnTheDeviceGeneratesTheCpuIds) {
  const test::TempDir tmp;
  const std::string file = tmp.file("prompts.txt");
  { std::ofstream(file) << "1,5,9,2,77,31,4,8,3\n1,5,9,2,77,31,4,8,60,61\n"; }
  const std::vector<std::string> args = {"--model",       "tiny",      "--prompts",        file,
                                         "--samples",     "2",         "--max-new-tokens", "10",
                                         "--temperature", "0",         "--block-size",     "4",
                                         "--json",        "--no-peak", "--kv-dtype",       "fp32"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), args.begin(), args.end());
    return run_program(kCh04, extra);
  };
  const auto cpu = with({"--device", "cpu"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  const auto gpu = with({"--device", "cuda", "--weight-dtype", "fp32"});
  if (std::string(KVHEAP_CUDA_MODE) != "sim" && gpu.exit_code == 1) {
    expect_one_line_error(gpu, "CUDA");  // no device here, and the error says so
    return;
  }
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  const auto jc = nlohmann::json::parse(cpu.out), jg = nlohmann::json::parse(gpu.out);
  EXPECT_EQ(jg["generated_ids"], jc["generated_ids"]);
  EXPECT_EQ(jg["sharing"], jc["sharing"]);
  EXPECT_EQ(jg["metrics"]["kv_bytes_per_step"], jc["metrics"]["kv_bytes_per_step"]);
}

// With the read peak measured (no --no-peak), each group is priced and read once only where that
// pays; the tokens stay chapter 1's. Without the peak there is nothing to price with: every group
// reads once, as with --read-once always.
TEST(Cli, Chapter4ReadsOnceWhereTheCostModelSaysItPays) {
  const std::vector<std::string> common = {"--model",
                                           "tiny",
                                           "--prompt-ids",
                                           "1,5,9,2,77,31,4,8,3,12",
                                           "--samples",
                                           "4",
                                           "--max-new-tokens",
                                           "12",
                                           "--temperature",
                                           "0",
                                           "--ignore-eos",
                                           "--block-size",
                                           "4",
                                           "--json"};
  const auto priced = run_program(kCh04, common);
  ASSERT_EQ(priced.exit_code, 0) << priced.err;
  std::vector<std::string> args = common;
  args.emplace_back("--no-peak");
  const auto unpriced = run_program(kCh04, args);
  ASSERT_EQ(unpriced.exit_code, 0) << unpriced.err;
  const auto jp = nlohmann::json::parse(priced.out), ju = nlohmann::json::parse(unpriced.out);
  EXPECT_EQ(jp["generated_ids"], ju["generated_ids"]);
  // One group of four rows a pass, from the second pass on (the first is the prompt's).
  EXPECT_TRUE(jp["sharing"]["priced"]);
  EXPECT_EQ(jp["sharing"]["groups_planned"], 11);
  EXPECT_LE(jp["sharing"]["groups_read_once"], 11);
  EXPECT_GT(jp["sharing"]["pricing_seconds"], 0.0);
  EXPECT_FALSE(ju["sharing"]["priced"]);
  EXPECT_EQ(ju["sharing"]["groups_read_once"], 11);
  EXPECT_EQ(ju["sharing"]["groups_planned"], 11);
  // The bytes read follow the choice: read once in every pass, or in none.
  const double per_position = 512.0;  // tiny: bytes of K and V per position, all layers
  const double saved = jp["sharing"]["kv_bytes_per_step_unshared"].get<double>() -
                       jp["metrics"]["kv_bytes_per_step"].get<double>();
  EXPECT_DOUBLE_EQ(saved, jp["sharing"]["groups_read_once"] == 11 ? 3 * 8 * per_position : 0.0);
}

TEST(Cli, Chapter4RefusesBadCounts) {
  expect_flags_refused(kCh04, {{"--samples", "0"},
                               {"--samples", "70000"},
                               {"--block-size", "0"},
                               {"--num-seqs", "0"},
                               {"--kv-budget-mb", "nan"},
                               {"--read-once", "sometimes"},
                               {"--read-once", "never", "--no-read-once"}});
}

}  // namespace
}  // namespace kvheap
