// What every chapter program shares: the request flags, the serving loop and the report. Each
// chapter serves a prompts file or copies of one prompt, gives each request chapter 1's greedy ids
// for it alone, and prints the same "serving" block.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/run_program.hpp"

namespace kvheap {
namespace {

using test::expect_one_line_error;
using test::run_program;

const std::vector<std::string> kChapters = {"ch01_cpu_reference", "ch02_contiguous_gpu",
                                            "ch03_paged_blocks", "ch04_cow_prefix_sharing",
                                            "ch05_batched_scheduler"};
const std::vector<std::string> kGreedy = {
    "--model", "tiny",      "--max-new-tokens", "10", "--temperature", "0", "--ignore-eos",
    "--json",  "--no-peak", "--device",         "cpu"};

/// Chapter 1's ids for `prompt` served alone.
nlohmann::json alone(const std::string& prompt) {
  std::vector<std::string> args = kGreedy;
  args.insert(args.end(), {"--prompt-ids", prompt});
  const auto r = run_program("ch01_cpu_reference", args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out)["generated_ids"];
}

std::set<std::string> keys(const nlohmann::json& j) {
  std::set<std::string> out;
  for (const auto& [k, v] : j.items()) out.insert(k);
  return out;
}

TEST(Cli, EveryChapterServesAPromptsFileAndPrintsTheSameServingBlock) {
  const std::vector<std::string> prompts = {"1,5,9,2,77", "1", "1,70,71"};
  const test::TempDir tmp;
  const std::string file = tmp.file("prompts.txt");
  {
    std::ofstream f(file);
    for (const auto& p : prompts) f << p << "\n";
  }
  std::vector<nlohmann::json> want;
  for (const auto& p : prompts) want.push_back(alone(p));
  std::set<std::string> serving_keys;
  for (const std::string& chapter : kChapters) {
    std::vector<std::string> args = kGreedy;
    args.insert(args.end(), {"--prompts", file});
    if (chapter == "ch04_cow_prefix_sharing") args.insert(args.end(), {"--samples", "1"});
    const auto r = run_program(chapter, args);
    ASSERT_EQ(r.exit_code, 0) << chapter << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["generated_ids"].size(), prompts.size()) << chapter;
    for (std::size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(j["generated_ids"][i], want[i]) << chapter << ", request " << i;
    EXPECT_EQ(j["serving"]["requests"], 3) << chapter;
    EXPECT_EQ(j["serving"]["generated_tokens"], 30) << chapter;
    EXPECT_EQ(j["sequences"].size(), 3u) << chapter;
    if (serving_keys.empty()) serving_keys = keys(j["serving"]);
    EXPECT_EQ(keys(j["serving"]), serving_keys) << chapter << " reports other serving fields";
  }
}

// The reservation policy in a budget of two reservations: five requests run as three static
// batches, at most two at once, and each still gets its own ids.
TEST(Cli, ReservationServesRequestsInStaticBatchesWithinTheBudget) {
  // tiny: 512 B per position x 96 = 49152 B per reservation; 0.1 MB holds two.
  const nlohmann::json want = alone("1");
  for (const char* chapter : {"ch01_cpu_reference", "ch02_contiguous_gpu"}) {
    std::vector<std::string> args = kGreedy;
    args.insert(args.end(), {"--num-seqs", "5", "--kv-budget-mb", "0.1"});
    const auto r = run_program(chapter, args);
    ASSERT_EQ(r.exit_code, 0) << chapter << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["serving"]["peak_running"], 2) << chapter;
    EXPECT_EQ(j["serving"]["prefill_passes"], 3) << chapter << ": batches of 2, 2 and 1";
    EXPECT_EQ(j["metrics"]["kv_reserved_bytes"], 2 * 49152) << chapter;
    ASSERT_EQ(j["generated_ids"].size(), 5u) << chapter;
    for (const auto& ids : j["generated_ids"]) EXPECT_EQ(ids, want) << chapter;
    for (const auto& s : j["sequences"]) EXPECT_EQ(s["status"], "max_new_tokens") << chapter;
  }
}

// The self-check names what it sets itself, and refuses it from the command line.
TEST(Cli, SelfCheckRefusesTheRequestFlagsItSetsItself) {
  for (const std::string& chapter : kChapters) {
    const auto r = run_program(chapter, {"--self-check", "--model", "tiny"});
    EXPECT_EQ(r.exit_code, 2) << chapter;
    expect_one_line_error(r, "--self-check");
  }
}

}  // namespace
}  // namespace kvheap
