// SmolLM2-135M-Instruct, a real GGUF model, through every chapter program: each one's greedy ids
// equal llama.cpp's (tests/data/gguf/smollm2.json, written by scripts/make_gguf_testdata.py) up
// to the first near tie, on the CPU and, in the simulator build, on the simulated GPU.
//
// The whole comparison (nine prompts of 24 tokens in the chapters that batch, two in chapter 1)
// runs in the simulator build, whose programs are optimised, with one prompt of 4 tokens on the
// simulated GPU in chapters 2-5; the CPU-only build (-O1) and the sanitizer build (where a run
// costs 2 s to load and 0.2 s a token) compare that short prompt's 6 tokens on the CPU: the same
// code paths, the model loaded and served whole, in a few seconds a chapter.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/gguf_writer.hpp"
#include "tests/support/run_program.hpp"
#include "tests/support/test_support.hpp"
#include "tests/support/source_tree.hpp"

namespace kvheap {
namespace {

using test::run_program;

constexpr bool kSanitized =
#if defined(__SANITIZE_ADDRESS__)
    true;
#else
    false;
#endif
const bool kFull = std::string(KVHEAP_CUDA_MODE) == "sim" && !kSanitized;

/// The top2_gap below which fp32 computations may pick different greedy tokens (near_tie()).
constexpr double kNearTie = 1e-4;

const nlohmann::json& oracle() {
  static const nlohmann::json j = nlohmann::json::parse(
      test::read_bytes((test::source_dir() / "tests" / "data" / "gguf" / "smollm2.json").string()));
  return j;
}

/// How one chapter's ids compared with llama.cpp's: tokens equal before the first difference or
/// near tie, and where a near tie cut the comparison.
struct Agreement {
  int equal = 0;
  int compared = 0;
  std::vector<std::string> cuts;
};

/// Runs `chapter` on the oracle prompts `which` for `tokens` tokens each and compares.
Agreement run_chapter(const std::string& chapter, const std::string& model,
                      const std::string& device, const std::vector<std::size_t>& which,
                      int tokens) {
  const nlohmann::json& gens = oracle().at("generation");
  const std::size_t prompts = which.size();
  std::vector<std::string> lines;
  for (const std::size_t i : which)
    lines.push_back(nlohmann::json{
        {"prompt_ids", gens[i].at("prompt_ids")},
        {"max_new_tokens",
         tokens}}.dump());
  const std::string workload = test::write_lines(
      testing::TempDir() + "/smollm2_" + chapter + "_" + device + ".jsonl", lines);
  std::vector<std::string> args = {"--model",      model,           "--workload", workload,
                                   "--ignore-eos", "--temperature", "0",          "--json",
                                   "--no-peak",    "--device",      device};
  if (chapter != "ch01_cpu_reference" && chapter != "ch02_contiguous_gpu")
    args.insert(args.end(), {"--kv-budget-mb", "64"});  // 1-2 reserve max_seq_len per request
  if (chapter == "ch04_cow_prefix_sharing") args.insert(args.end(), {"--samples", "1"});
  const test::ProgramResult r = run_program(chapter, args);
  Agreement a;
  EXPECT_EQ(r.exit_code, 0) << chapter << " " << device << ": " << r.err;
  if (r.exit_code != 0) return a;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  // One request's report is flat in chapters 1 and 2: its ids at the top, no "sequences".
  std::vector<std::vector<int>> generated;
  if (out.contains("sequences")) {
    for (const nlohmann::json& seq : out.at("sequences"))
      generated.push_back(seq.at("generated_ids").get<std::vector<int>>());
  } else {
    generated.push_back(out.at("generated_ids").get<std::vector<int>>());
  }
  EXPECT_EQ(generated.size(), prompts);
  for (std::size_t k = 0; k < std::min(prompts, generated.size()); ++k) {
    const std::size_t i = which[k];
    const std::vector<int>& got = generated[k];
    const auto want = gens[i].at("ids").get<std::vector<int>>();
    const auto gaps = gens[i].at("top2_gaps").get<std::vector<double>>();
    for (int t = 0; t < tokens; ++t) {
      if (gaps[t] < kNearTie) {  // either token may win: stop comparing this prompt
        a.cuts.push_back(fmt::format("prompt {} at token {} (gap {:.2g})", i, t, gaps[t]));
        break;
      }
      if (got[t] != want[t]) {
        ++a.compared;
        ADD_FAILURE() << chapter << " on " << device << ", prompt " << i << ": token " << t
                      << " is " << got[t] << ", llama.cpp's " << want[t] << " (top-2 gap "
                      << gaps[t] << ")";
        break;
      }
      ++a.compared;
      ++a.equal;
    }
  }
  return a;
}

TEST(Cli, SmolLM2GivesLlamaCppsIdsInEveryChapter) {
  KVHEAP_REQUIRE_MODEL(model, "SmolLM2-135M-Instruct.Q4_1.gguf");
  std::vector<std::size_t> all(oracle().at("generation").size());
  std::iota(all.begin(), all.end(), 0);
  const std::vector<std::size_t> first_two = {0, 1};
  // Prompt 5 is "Once upon a time": four tokens, the cheapest prefill for the simulated GPU.
  const std::vector<std::size_t> short_prompt = {5};
  for (const std::string& chapter : test::kChapterPrograms) {
    // Chapter 1 serves one request at a time (12 s for all nine): its first two prompts, a chat
    // and a haiku; the chapters that batch take all nine.
    const std::vector<std::size_t>& prompts = !kFull                            ? short_prompt
                                              : chapter == "ch01_cpu_reference" ? first_two
                                                                                : all;
    std::vector<std::tuple<std::string, const std::vector<std::size_t>*, int>> runs = {
        {"cpu", &prompts, kFull ? 24 : 6}};
    // The simulated GPU costs 0.3-0.8 s a forward pass here: one short prompt, 4 tokens.
    if (std::string(KVHEAP_CUDA_MODE) == "sim" && !kSanitized && chapter != "ch01_cpu_reference")
      runs.emplace_back("cuda", &short_prompt, 4);
    for (const auto& [device, which, tokens] : runs) {
      const Agreement a = run_chapter(chapter, model, device, *which, tokens);
      std::cout << chapter << " --device " << device << ": " << a.equal << " of " << a.compared
                << " tokens equal to llama.cpp's"
                << (a.cuts.empty() ? ""
                                   : fmt::format("; near ties cut {}", fmt::join(a.cuts, ", ")))
                << "\n";
    }
  }
}

// A malformed GGUF file ends the program with one line naming the problem, exit status 1.
TEST(Cli, ABadGgufFileExitsOneWithTheProblemNamed) {
  const std::string good = test::tiny_model_gguf().bytes();
  const std::string dir = testing::TempDir();
  test::write_bytes(dir + "/cut.gguf", good.substr(0, good.size() / 2));
  test::ProgramResult r = run_program("ch01_cpu_reference", {"--model", dir + "/cut.gguf"});
  EXPECT_EQ(r.exit_code, 1);
  test::expect_one_line_error(r, "truncated");
  test::GgufWriter other = test::tiny_model_gguf();
  other.tensor("blk.0.ffn_extra.weight", {8}, 0, std::string(32, '\0'));
  test::write_bytes(dir + "/extra.gguf", other.bytes());
  r = run_program("ch05_batched_scheduler", {"--model", dir + "/extra.gguf", "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  test::expect_one_line_error(r, "holds tensor 'blk.0.ffn_extra.weight'");
  // The tiny model itself runs, its tokenizer read from the file.
  test::write_bytes(dir + "/tiny.gguf", good);
  r = run_program("ch01_cpu_reference", {"--model", dir + "/tiny.gguf", "--prompt", "abc",
                                         "--max-new-tokens", "3", "--no-peak"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("text: "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kvheap
