// Chapter 5's program: how requests are batched, chunked and preempted changes when tokens come
// out, never which tokens.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/run_program.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

using test::expect_flags_refused;
using test::expect_one_line_error;
using test::run_program;

const char* kCh05 = "ch05_batched_scheduler";

/// Writes one prompt per line into `dir` and returns the file's path.
std::string prompts_file(const test::TempDir& dir, const std::vector<std::string>& prompts) {
  const std::string file = dir.file("prompts.txt");
  std::ofstream f(file);
  for (const auto& p : prompts) f << p << "\n";
  return file;
}

// Four requests, three of them beginning alike, in a pool that holds about one and a half of
// them at their longest, five rows per step: prompts are cut into chunks, requests are preempted
// and recomputed, and every request still generates, greedily, what chapter 1 generates for it
// alone.
TEST(Cli, Chapter5GeneratesChapter1sIdsForEveryRequestWhilePreempting) {
  KVHEAP_REQUIRE_MODEL(model, "stories260K.bin");
  const std::vector<std::string> prompts = {"1,403,407,261,378,271,420,306,422,259",
                                            "1,403,407,261,378,271,420,306,280,295,300",
                                            "1,403,407,261,50,60", "1,330,331,332,333,334,335"};
  const test::TempDir tmp;
  // stories260K: 1280 B of K and V per position; 0.06 MB = 11 blocks of 4, and a request of 11
  // prompt tokens and 30 new ones holds up to 10.
  const auto r = run_program(
      kCh05, {"--model", model, "--prompts", prompts_file(tmp, prompts), "--max-new-tokens", "30",
              "--temperature", "0", "--ignore-eos", "--block-size", "4", "--max-batch-tokens", "5",
              "--kv-budget-mb", "0.06", "--json", "--no-peak"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["scheduler"]["preemptions"], 0);
  EXPECT_GT(j["scheduler"]["recomputed_rows"], 0);
  EXPECT_GT(j["scheduler"]["positions_reused"], 0);
  EXPECT_GT(j["scheduler"]["peak_running"], 1);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto ref = run_program(
        "ch01_cpu_reference", {"--model", model, "--prompt-ids", prompts[i], "--max-new-tokens",
                               "30", "--temperature", "0", "--ignore-eos", "--json", "--no-peak"});
    ASSERT_EQ(ref.exit_code, 0) << ref.err;
    EXPECT_EQ(j["generated_ids"][i], nlohmann::json::parse(ref.out)["generated_ids"])
        << "request " << i;
  }
}

// Without --ignore-eos, requests stop at the stop token at different steps, as chapter 1's do.
TEST(Cli, Chapter5StopsEachRequestWhereChapter1Stops) {
  KVHEAP_REQUIRE_MODEL(model, "stories260K.bin");
  const std::vector<std::string> prompts = {"1,403,407,261,378", "1,403,407,261,378,271,420",
                                            "1,330,331"};
  const test::TempDir tmp;
  const auto r =
      run_program(kCh05, {"--model", model, "--prompts", prompts_file(tmp, prompts),
                          "--max-new-tokens", "200", "--temperature", "0", "--block-size", "4",
                          "--max-batch-tokens", "8", "--json", "--no-peak"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto ref = run_program("ch01_cpu_reference",
                                 {"--model", model, "--prompt-ids", prompts[i], "--max-new-tokens",
                                  "200", "--temperature", "0", "--json", "--no-peak"});
    ASSERT_EQ(ref.exit_code, 0) << ref.err;
    const auto jr = nlohmann::json::parse(ref.out);
    EXPECT_EQ(j["generated_ids"][i], jr["generated_ids"]) << "request " << i;
    EXPECT_EQ(j["sequences"][i]["status"], jr["metrics"]["stop_reason"]) << "request " << i;
  }
}

// Nothing to generate: every request is done at once, and nothing runs.
TEST(Cli, Chapter5WithNoNewTokensRunsNothing) {
  const auto r = run_program(kCh05, {"--model", "tiny", "--num-seqs", "3", "--max-new-tokens", "0",
                                     "--json", "--no-peak"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["scheduler"]["steps"], 0);
  for (const auto& s : j["sequences"]) {
    EXPECT_EQ(s["status"], "max_new_tokens");
    EXPECT_TRUE(s["generated_ids"].empty());
  }
}

// The memory figures count what running requests hold; blocks the prefix index keeps of finished
// requests are reported apart. Requests arriving 1000 steps apart run one at a time.
TEST(Cli, Chapter5CountsRunningRequestsKvApartFromCachedBlocks) {
  const auto r = run_program(kCh05, {"--model", "tiny", "--num-seqs", "3", "--max-new-tokens", "10",
                                     "--temperature", "0", "--ignore-eos", "--block-size", "4",
                                     "--arrival-interval", "1000", "--json", "--no-peak"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto m = nlohmann::json::parse(r.out)["metrics"];
  // tiny: 512 B per position; one request holds 1 + 9 positions in 3 blocks of 4.
  EXPECT_EQ(m["kv_used_bytes"], 10 * 512);
  EXPECT_EQ(m["kv_reserved_bytes"], 3 * 4 * 512);
  EXPECT_GE(m["kv_cached_peak_bytes"], 2 * 4 * 512) << "finished requests' full blocks stay cached";
}

// Admission by free blocks: in a budget where chapter 4, admitting each prompt's worst case, runs
// one request at a time, chapter 5 runs several at once and serves every one.
TEST(Cli, Chapter5RunsMoreAtOnceThanChapter4InTheSameBudget) {
  // tiny: 512 B per position; 0.01 MB = 19 blocks of 1. Each request stores up to 1 + 11
  // positions: chapter 4 admits the first (12 blocks), and the second would need 11 more.
  const std::vector<std::string> args = {
      "--model",  "tiny",         "--num-seqs",   "3", "--max-new-tokens", "12",   "--temperature",
      "0",        "--ignore-eos", "--block-size", "1", "--kv-budget-mb",   "0.01", "--json",
      "--no-peak"};
  std::vector<std::string> a4 = args;
  a4.insert(a4.end(), {"--samples", "1"});
  const auto r4 = run_program("ch04_cow_prefix_sharing", a4);
  ASSERT_EQ(r4.exit_code, 0) << r4.err;
  const auto j4 = nlohmann::json::parse(r4.out);
  EXPECT_EQ(j4["serving"]["peak_running"], 1) << r4.out;
  const auto r5 = run_program(kCh05, args);
  ASSERT_EQ(r5.exit_code, 0) << r5.err;
  const auto j = nlohmann::json::parse(r5.out);
  EXPECT_GE(j["serving"]["peak_running"], 2) << r5.out;
  for (const auto& s : j["sequences"]) EXPECT_EQ(s["status"], "max_new_tokens");
  EXPECT_EQ(j["metrics"]["generated_tokens"], 3 * 12);
  EXPECT_EQ(j["generated_ids"], j4["generated_ids"]);
}

// Staggered arrivals join a running batch: a later request starts while earlier ones decode.
TEST(Cli, Chapter5AdmitsArrivalsIntoTheRunningBatch) {
  const auto r = run_program(
      kCh05, {"--model", "tiny", "--num-seqs", "3", "--max-new-tokens", "10", "--temperature", "0",
              "--ignore-eos", "--arrival-interval", "4", "--json", "--no-peak"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["sequences"].size(), 3u);
  EXPECT_EQ(j["sequences"][1]["arrival_step"], 4);
  EXPECT_EQ(j["sequences"][2]["arrival_step"], 8);
  EXPECT_LT(j["sequences"][1]["arrival_step"], j["sequences"][0]["finish_step"])
      << "request 1 should join while request 0 is still decoding";
  EXPECT_EQ(j["scheduler"]["peak_running"], 3);
  EXPECT_EQ(j["generated_ids"][0], j["generated_ids"][2]);
}

// The device cache (the simulator in a sim build) serves the same requests to the same ids with
// the same schedule: the scheduler is host code whatever holds the bytes.
TEST(Cli, Chapter5OnTheDeviceGeneratesTheCpuIds) {
  const test::TempDir tmp;
  const std::vector<std::string> args = {
      "--model",
      "tiny",
      "--prompts",
      prompts_file(tmp, {"1,5,9,2,77,31,4,8,3", "1,5,9,2,77,40"}),
      "--max-new-tokens",
      "10",
      "--temperature",
      "0",
      "--block-size",
      "4",
      "--max-batch-tokens",
      "4",
      "--kv-budget-mb",
      "0.012",
      "--json",
      "--no-peak"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), args.begin(), args.end());
    return run_program(kCh05, extra);
  };
  const auto cpu = with({"--device", "cpu"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  const auto gpu = with({"--device", "cuda"});
  if (std::string(KVHEAP_CUDA_MODE) != "sim" && gpu.exit_code == 1) {
    expect_one_line_error(gpu, "CUDA");  // no device here, and the error says so
    return;
  }
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  const auto jc = nlohmann::json::parse(cpu.out), jg = nlohmann::json::parse(gpu.out);
  EXPECT_EQ(jg["generated_ids"], jc["generated_ids"]);
  EXPECT_EQ(jg["scheduler"], jc["scheduler"]);
  EXPECT_GT(jc["scheduler"]["preemptions"], 0);
}

TEST(Cli, Chapter5RefusesBadLimitsAndRequestsThatCannotFit) {
  expect_flags_refused(kCh05, {{"--max-batch-tokens", "0"},
                               {"--max-running", "0"},
                               {"--arrival-interval", "-1"},
                               {"--read-once", "sometimes"},
                               {"--block-size", "0"},
                               {"--num-seqs", "0"}});
  // 0.002 MB of tiny = 3 blocks of 1: a request of 1 + 7 positions can never fit.
  const auto r = run_program(kCh05, {"--model", "tiny", "--max-new-tokens", "8", "--block-size",
                                     "1", "--kv-budget-mb", "0.002", "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "blocks");
}

}  // namespace
}  // namespace kvheap
