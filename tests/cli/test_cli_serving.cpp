// What every chapter program shares: the request flags, the serving loop and the report. Each
// chapter serves a prompts file or copies of one prompt, gives each request chapter 1's greedy ids
// for it alone, and prints the same "serving" block.
#include <gtest/gtest.h>

#include <algorithm>
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

const std::vector<std::string>& kChapters = test::kChapterPrograms;
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

// The phase breakdown: each pass's phases sum to no more than its step (on the CPU, and in the
// simulator, whose events are host times), the timeline's passes sum to the run's totals, and
// "other" is what the phases leave of the steps.
TEST(Cli, PhasesAddUpForEachPassAndForTheRun) {
  std::vector<std::vector<std::string>> runs = {{"ch05_batched_scheduler", "--device", "cpu"}};
  if (std::string(KVHEAP_CUDA_MODE) == "sim")
    runs.push_back({"ch03_paged_blocks", "--device", "cuda"});
  for (const std::vector<std::string>& run : runs) {
    std::vector<std::string> args = kGreedy;
    *(std::find(args.begin(), args.end(), "--device") + 1) = run[2];
    args.insert(args.end(), {"--num-seqs", "3", "--prompt-ids", "1,5,9"});
    const auto r = run_program(run[0], args);
    ASSERT_EQ(r.exit_code, 0) << run[0] << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    const auto& phases = j["serving"]["phases"];
    const auto& t = j["timeline"];
    const std::size_t passes = j["serving"]["passes"];
    ASSERT_EQ(t["wall_s"].size(), passes) << run[0];
    EXPECT_EQ(phases["device_timed"].get<bool>(), run[2] == "cuda") << run[0];
    double sum_wall = 0;
    for (std::size_t i = 0; i < passes; ++i) {
      const double parts = t["schedule_s"][i].get<double>() + t["prepare_s"][i].get<double>() +
                           t["forward_s"][i].get<double>() + t["sample_s"][i].get<double>() +
                           t["record_s"][i].get<double>();
      const double wall = t["wall_s"][i];
      EXPECT_GT(t["forward_s"][i].get<double>(), 0.0) << run[0] << ", pass " << i;
      EXPECT_LE(parts, wall * (1 + 1e-9) + 1e-9) << run[0] << ", pass " << i;
      sum_wall += wall;
    }
    EXPECT_NEAR(phases["wall_s"].get<double>(), sum_wall, 1e-9 * passes) << run[0];
    const double other = phases["wall_s"].get<double>() - phases["schedule_s"].get<double>() -
                         phases["prepare_s"].get<double>() - phases["forward_s"].get<double>() -
                         phases["sample_s"].get<double>() - phases["record_s"].get<double>();
    EXPECT_NEAR(phases["other_s"].get<double>(), other, 1e-9) << run[0];
    EXPECT_NEAR(phases["per_pass_ms"]["wall"].get<double>(),
                1e3 * phases["wall_s"].get<double>() / static_cast<double>(passes), 1e-9)
        << run[0];
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

/// Writes `lines` to a workload file in the test's temporary folder and returns its path.
std::string workload(const std::string& name, const std::vector<std::string>& lines) {
  return test::write_lines(testing::TempDir() + "/" + name + ".jsonl", lines);
}

// The timeline's KV samples are the pool, whole, at every pass: held by running requests, cached
// by a prefix index, or free. Chapter 5 here preempts, so blocks move between all three.
TEST(Cli, OccupancyAddsUpToThePoolAtEveryPass) {
  const std::string w = workload(
      "occupancy", {R"({"prompt_ids": [1, 5, 9, 2, 77, 31, 4, 8], "max_new_tokens": 12})",
                    R"({"prompt_ids": [1, 5, 9, 2, 77, 31, 4, 8, 60], "max_new_tokens": 9})",
                    R"({"prompt_ids": [1, 70], "max_new_tokens": 14, "arrival_step": 3})",
                    R"({"prompt_ids": [1], "max_new_tokens": 6, "arrival_step": 5})"});
  // tiny: 512 B per position; 0.0123 MB = 24 blocks of 1 (12288 B): enough for one request alone
  // (at most 20 positions), not for all four at once.
  for (const std::string chapter :
       {"ch03_paged_blocks", "ch04_cow_prefix_sharing", "ch05_batched_scheduler"}) {
    std::vector<std::string> args = {"--workload",     w,       "--block-size", "1",
                                     "--kv-budget-mb", "0.0123"};
    args.insert(args.end(), kGreedy.begin(), kGreedy.end());
    if (chapter == "ch04_cow_prefix_sharing") args.insert(args.end(), {"--samples", "1"});
    const auto r = run_program(chapter, args);
    ASSERT_EQ(r.exit_code, 0) << chapter << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    const auto& t = j["timeline"];
    const std::size_t passes = j["serving"]["passes"];
    ASSERT_EQ(t["step"].size(), passes) << chapter;
    std::size_t cached = 0;
    int most_running = 0;
    for (std::size_t i = 0; i < passes; ++i) {
      const std::size_t sum = t["kv_held_bytes"][i].get<std::size_t>() +
                              t["kv_cached_bytes"][i].get<std::size_t>() +
                              t["kv_free_bytes"][i].get<std::size_t>();
      EXPECT_EQ(sum, 24u * 512) << chapter << " pass " << i;
      if (t["running"][i] > 0) {
        EXPECT_GT(t["kv_held_bytes"][i], 0u) << chapter << " pass " << i;
      }
      cached = std::max(cached, t["kv_cached_bytes"][i].get<std::size_t>());
      most_running = std::max(most_running, t["running"][i].get<int>());
    }
    EXPECT_EQ(most_running, j["serving"]["peak_running"]) << chapter;
    if (chapter != "ch03_paged_blocks") {
      EXPECT_GT(cached, 0u) << chapter << ": nothing cached";
    }
    if (chapter == "ch05_batched_scheduler") {
      EXPECT_GT(j["serving"]["preemptions"], 0) << r.out;
    }
    for (const auto& s : j["sequences"]) EXPECT_EQ(s["status"], "max_new_tokens") << chapter;
  }
}

// Arrivals in seconds are kept against the wall clock: the loop waits for a late request, and
// its TTFT counts from its arrival, not from the start of the run.
TEST(Cli, WallClockArrivalsAreWaitedForAndLatencyCountsFromThem) {
  const std::string w =
      workload("clock", {R"({"prompt_ids": [1, 5], "max_new_tokens": 10, "arrival_s": 0})",
                         R"({"prompt_ids": [1, 6], "max_new_tokens": 10, "arrival_s": 0.4})"});
  for (const std::string chapter : {"ch03_paged_blocks", "ch05_batched_scheduler"}) {
    std::vector<std::string> args = {"--workload", w};
    args.insert(args.end(), kGreedy.begin(), kGreedy.end());
    const auto r = run_program(chapter, args);
    ASSERT_EQ(r.exit_code, 0) << chapter << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_GE(j["serving"]["seconds"].get<double>(), 0.4) << chapter;
    const auto& late = j["sequences"][1];
    EXPECT_DOUBLE_EQ(late["arrival_s"].get<double>(), 0.4) << chapter;
    EXPECT_GE(late["ttft_s"].get<double>(), 0.0) << chapter;
    EXPECT_LT(late["ttft_s"].get<double>(), 0.3) << chapter << ": TTFT counted from the start";
    const auto& ttft = j["serving"]["ttft_s"];
    EXPECT_EQ(ttft["count"], 2);
    EXPECT_LE(ttft["p50"].get<double>(), ttft["p99"].get<double>());
    EXPECT_EQ(j["sequences"][1]["generated_ids"], alone("1,6")) << chapter;
  }
}

// A workload file with a bad line stops the program before anything runs, naming line and field.
TEST(Cli, AMalformedWorkloadLineIsOneErrorNamingIt) {
  const std::string w =
      workload("bad", {R"({"prompt_ids": [1, 2]})", R"({"prompt_ids": [1, 999]})"});
  for (const std::string& chapter : kChapters) {
    const auto r = run_program(chapter, {"--model", "tiny", "--workload", w, "--no-peak"});
    EXPECT_EQ(r.exit_code, 1) << chapter;
    expect_one_line_error(r, "line 2: 'prompt_ids' element 2 is 999");
  }
  const auto both =
      run_program("ch03_paged_blocks", {"--model", "tiny", "--workload", w, "--num-seqs", "2"});
  EXPECT_EQ(both.exit_code, 2) << both.err;
}

}  // namespace
}  // namespace kvheap
