// The command line every chapter shares: --json output and exit codes for bad input.
//
// Usage errors (unknown flags, malformed numbers, impossible values) exit 2; input and resource
// errors (bad files, out-of-range ids, exhausted budgets) exit 1; both print one line on stderr
// that names the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "common/forward/reference_forward.hpp"
#include "common/serving/report.hpp"
#include "common/serving/sampler.hpp"
#include "common/model/synthetic_weights.hpp"
#include "kernels/matmul.hpp"
#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/run_program.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

using test::expect_one_line_error;
using test::run_program;

const char* kCh01 = "ch01_cpu_reference";

TEST(Cli, JsonPrintsGeneratedIdsAndMetrics) {
  const auto r = run_program(kCh01, {"--model", "tiny", "--prompt-ids", "1,5,9", "--max-new-tokens",
                                     "12", "--ignore-eos", "--json", "--no-peak"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("generated_ids"));
  EXPECT_EQ(j["generated_ids"].size(), 12u);
  EXPECT_EQ(j["prompt_ids"], nlohmann::json({1, 5, 9}));
  EXPECT_GT(j["metrics"]["decode_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["metrics"]["kv_reserved_bytes"].get<double>(),
            j["metrics"]["kv_used_bytes"].get<double>());
}

TEST(Cli, Stories260KJsonMatchesTheLibrary) {
  KVHEAP_REQUIRE_MODEL(path, "stories260K.bin");
  const auto r = run_program(kCh01, {"--model", path, "--prompt-ids", "1", "--max-new-tokens",
                                     "200", "--temperature", "0", "--json", "--no-peak"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto ids = nlohmann::json::parse(r.out)["generated_ids"].get<std::vector<int>>();
  EXPECT_EQ(ids.size(), 200u);  // greedy stories260K does not emit BOS within 200 tokens
  const auto again =
      run_program(kCh01, {"--model", path, "--prompt-ids", "1", "--max-new-tokens", "200",
                          "--temperature", "0", "--json", "--no-peak", "--threads", "1"});
  EXPECT_EQ(nlohmann::json::parse(again.out)["generated_ids"].get<std::vector<int>>(), ids)
      << "thread count must not change greedy output";
}

// A synthetic Qwen3 folder from the test writer, run by the program: its greedy ids are the
// reference forward pass's, and a stop token that only generation_config.json lists ends the
// generation, as transformers would end it.
TEST(Cli, Qwen3FolderRunsAndStopsOnGenerationConfigTokens) {
  const test::TempDir tmp;
  const std::string dir = tmp.file("tiny-qwen3");
  ModelConfig c = test::tiny_qwen3_config();
  c.stop_ids = {0};           // config.json's stop token
  c.tied_embeddings = false;  // tied, this tiny model would repeat its last token
  const ModelWeights w = make_synthetic_weights(c, 13);
  test::write_safetensors(w, dir);
  std::vector<int> tokens = {1, 17, 4};
  std::vector<int> want;  // greedy ids, recomputed from scratch after every token
  for (int i = 0; i < 6; ++i) {
    const std::vector<float> logits = reference_logits(w, tokens);
    const int next = argmax(std::span<const float>(logits).last(c.vocab_size));
    ASSERT_NE(next, 0) << "the synthetic model must not stop early on its own";
    want.push_back(next);
    tokens.push_back(next);
  }
  const std::vector<std::string> args = {"--model",          dir, "--prompt-ids", "1,17,4",
                                         "--temperature",    "0", "--json",       "--no-peak",
                                         "--max-new-tokens", "6"};
  const auto r = run_program(kCh01, args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["generated_ids"].get<std::vector<int>>(), want);

  // Stop at the fourth token's id, which config.json does not name: the ids before its first
  // appearance come out, and the reason.
  const std::vector<int> before(want.begin(), std::find(want.begin(), want.end(), want[3]));
  ASSERT_GE(before.size(), 2u) << "the greedy ids must vary for the stop to show";
  test::write_bytes(dir + "/generation_config.json",
                    nlohmann::json({{"eos_token_id", {want[3], 0}}}).dump());
  const auto stopped = run_program(kCh01, args);
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  const auto j = nlohmann::json::parse(stopped.out);
  EXPECT_EQ(j["generated_ids"].get<std::vector<int>>(), before);
  EXPECT_EQ(j["metrics"]["stop_reason"], "stop token");
}

TEST(Cli, UnknownFlagExitsTwo) {
  const auto r = run_program(kCh01, {"--model", "tiny", "--frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "--frobnicate");
}

TEST(Cli, MalformedNumberExitsTwo) {
  const auto r = run_program(kCh01, {"--model", "tiny", "--max-new-tokens", "ten"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "ten");
}

TEST(Cli, MalformedPromptIdsExitTwo) {
  const auto r = run_program(kCh01, {"--model", "tiny", "--prompt-ids", "1,x7,3"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "x7");
}

TEST(Cli, TokenIdOutsideTheVocabularyExitsTwo) {
  const auto r = run_program(kCh01, {"--model", "tiny", "--prompt-ids", "1,128", "--no-peak"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "128");
}

TEST(Cli, MissingModelExitsOne) {
  const auto r = run_program(kCh01, {"--model", "/nonexistent/model.bin"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "/nonexistent/model.bin");
}

TEST(Cli, CudaDeviceInChapterOneExitsTwo) {
  const auto r = run_program(kCh01, {"--model", "tiny", "--device", "cuda"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "CPU only");
}

TEST(Cli, MaxNewTokensPastTheContextExitsTwo) {
  const auto r = run_program(kCh01, {"--model", "tiny", "--max-new-tokens", "500"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "past the context");
}

TEST(Cli, KvBudgetTooSmallForOneSequenceExitsOne) {
  const auto r = run_program(kCh01, {"--model", "tiny", "--kv-budget-mb", "0.001", "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "cannot hold even one sequence");
}

TEST(Cli, BadKvDtypeAndSamplerValuesExitTwo) {
  auto r = run_program(kCh01, {"--model", "tiny", "--kv-dtype", "int4"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "int4");
  r = run_program(kCh01, {"--model", "tiny", "--temperature", "-1", "--no-peak"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "--temperature");
  r = run_program(kCh01, {"--model", "tiny", "--top-p", "1.5", "--no-peak"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "--top-p");
}

TEST(Cli, PromptTextWithoutTokenizerExitsTwo) {
  const auto r = run_program(kCh01, {"--model", "tiny", "--prompt", "Once upon a time"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line_error(r, "--tokenizer");
}

TEST(Cli, TokenizerOfAnotherVocabularyExitsOne) {
  KVHEAP_REQUIRE_MODEL(model, "stories260K.bin");
  KVHEAP_REQUIRE_MODEL(tok, "tokenizer.bin");
  const auto r = run_program(kCh01, {"--model", model, "--tokenizer", tok, "--prompt", "Hi"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "512");
}

// Chapter 2 agrees with chapter 1 on --json: on its CPU backend always, and on --device cuda in
// the simulator build (or on a GPU). Where no device exists, asking for one is a clear error.
TEST(Cli, Chapter2PrintsTheSameIdsAsChapter1) {
  const std::vector<std::string> args = {"--model",          "tiny",   "--prompt-ids",  "1,5,9",
                                         "--max-new-tokens", "20",     "--temperature", "0",
                                         "--ignore-eos",     "--json", "--no-peak"};
  const auto ref = run_program(kCh01, args);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const auto ids = nlohmann::json::parse(ref.out)["generated_ids"];
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), args.begin(), args.end());
    return run_program("ch02_contiguous_gpu", extra);
  };
  const auto cpu = with({"--device", "cpu"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(nlohmann::json::parse(cpu.out)["generated_ids"], ids);

  const auto gpu = with({"--device", "cuda", "--weight-dtype", "fp32", "--kv-dtype", "fp32"});
  if (std::string(KVHEAP_CUDA_MODE) == "sim") {
    ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
    EXPECT_EQ(nlohmann::json::parse(gpu.out)["generated_ids"], ids);
  } else if (gpu.exit_code == 1) {
    // No device here: the one-line error says why ("no CUDA device found", "no CUDA support").
    expect_one_line_error(gpu, "CUDA");
  } else {
    ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
    EXPECT_EQ(nlohmann::json::parse(gpu.out)["generated_ids"], ids);
  }
}

// The CPU backend keeps 16-bit weights as they are and widens them in its products: a step reads
// half the weight bytes, and the report says which weights and which loops ran.
TEST(Cli, Chapter2RunsHalfWeightsOnTheCpuBackend) {
  const auto run = [](const std::string& dtype) {
    const auto r =
        run_program("ch02_contiguous_gpu",
                    {"--model", "tiny", "--device", "cpu", "--weight-dtype", dtype, "--prompt-ids",
                     "1,5,9", "--max-new-tokens", "4", "--no-peak", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["metrics"];
  };
  const auto f32 = run("fp32");
  EXPECT_NE(f32["weight_products"].get<std::string>().find("loaded as is"), std::string::npos);
  for (const std::string dtype : {"bf16", "fp16"}) {
    const auto m = run(dtype);
    EXPECT_EQ(m["weight_dtype"], dtype);
    EXPECT_NE(m["weight_products"].get<std::string>().find(dtype + " widened"), std::string::npos)
        << m["weight_products"];
    // The embedding row and the norms stay fp32; every matrix is half.
    EXPECT_LT(m["weight_bytes_per_step"].get<double>(),
              0.6 * f32["weight_bytes_per_step"].get<double>());
  }
}

// --bf16-products pairs runs AVX512-BF16's products where the build has them, says so in the
// report and passes every chapter's self-check; everywhere it cannot run (a build without them,
// the GPU, other weights), and for a value it does not know, it is refused in one line that says
// what would do.
TEST(Cli, Bf16PairsRunWhereBuiltAndAreRefusedElsewhere) {
  const auto run = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--model",          "tiny", "--prompt-ids", "1,5,9",
                                     "--max-new-tokens", "4",    "--no-peak",    "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_program("ch02_contiguous_gpu", args);
  };
  const auto unknown = run({"--device", "cpu", "--bf16-products", "fast"});
  EXPECT_EQ(unknown.exit_code, 2);
  expect_one_line_error(unknown, "expected widen or pairs");
  const auto pairs = run({"--device", "cpu", "--weight-dtype", "bf16", "--bf16-products", "pairs"});
  if (!cpu::bf16_pairs_built()) {
    EXPECT_EQ(pairs.exit_code, 2);
    expect_one_line_error(pairs, "AVX512-BF16");
    return;
  }
  const auto gpu = run({"--device", "cuda", "--weight-dtype", "bf16", "--bf16-products", "pairs"});
  EXPECT_EQ(gpu.exit_code, 2);
  expect_one_line_error(gpu, "--device cpu");
  const auto fp32 = run({"--device", "cpu", "--bf16-products", "pairs"});
  EXPECT_EQ(fp32.exit_code, 2);
  expect_one_line_error(fp32, "--weight-dtype bf16");

  ASSERT_EQ(pairs.exit_code, 0) << pairs.err;
  const auto m = nlohmann::json::parse(pairs.out)["metrics"];
  EXPECT_NE(m["weight_products"].get<std::string>().find("vdpbf16ps"), std::string::npos)
      << m["weight_products"];
  // Every chapter's greedy ids with pairs are the reference forward pass's.
  for (const std::string program :
       {"ch01_cpu_reference", "ch02_contiguous_gpu", "ch03_paged_blocks", "ch04_cow_prefix_sharing",
        "ch05_batched_scheduler"}) {
    std::vector<std::string> args = {"--self-check", "--weight-dtype", "bf16", "--bf16-products",
                                     "pairs"};
    if (program != "ch01_cpu_reference") args.insert(args.end(), {"--device", "cpu"});
    const auto r = run_program(program, args);
    EXPECT_EQ(r.exit_code, 0) << program << ": " << r.err;
    EXPECT_NE(r.out.find("Disposition: Passed"), std::string::npos) << program << ": " << r.out;
  }
}

// Chapter 3 serves several sequences in one batch; each one's ids equal chapter 1 decoding that
// prompt alone, and the pool is reported.
TEST(Cli, Chapter3GeneratesPerSequenceIdsEqualToChapter1) {
  const std::vector<std::string> prompts = {"1,5,9", "1", "1,70,71,72,73,74"};
  const test::TempDir tmp;
  const std::string file = tmp.file("prompts.txt");
  {
    std::ofstream f(file);
    for (const auto& p : prompts) f << p << "\n";
  }
  const auto r = run_program("ch03_paged_blocks",
                             {"--model", "tiny", "--prompts", file, "--max-new-tokens", "15",
                              "--temperature", "0", "--block-size", "3", "--json", "--no-peak"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["generated_ids"].size(), prompts.size());
  EXPECT_EQ(j["pool"]["block_size"], 3);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto ref =
        run_program(kCh01, {"--model", "tiny", "--prompt-ids", prompts[i], "--max-new-tokens", "15",
                            "--temperature", "0", "--json", "--no-peak"});
    ASSERT_EQ(ref.exit_code, 0) << ref.err;
    EXPECT_EQ(j["generated_ids"][i], nlohmann::json::parse(ref.out)["generated_ids"])
        << "sequence " << i;
  }
}

TEST(Cli, Chapter3SequencesBeyondTheBudgetWaitForTheNextBatch) {
  // tiny: 2 layers x 2 KV heads x 16 dims x 2 x 4 B = 512 B per token; 0.01 MB = 19 blocks of 1.
  // A sequence stores at most 1 + 8 - 1 = 8 positions (the last token is never fed back), so
  // two worst cases fit at once and the third waits for the first batch to end.
  const auto r =
      run_program("ch03_paged_blocks",
                  {"--model", "tiny", "--num-seqs", "3", "--max-new-tokens", "8", "--ignore-eos",
                   "--block-size", "1", "--kv-budget-mb", "0.01", "--json", "--no-peak"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["not_admitted"].size(), 0u) << r.out;
  EXPECT_EQ(j["serving"]["peak_running"], 2);
  for (const auto& s : j["sequences"]) EXPECT_EQ(s["status"], "max_new_tokens") << r.out;
  EXPECT_GE(j["sequences"][2]["arrival_step"], 0);
  EXPECT_GT(j["sequences"][2]["finish_step"].get<long>(),
            j["sequences"][1]["finish_step"].get<long>() + 7)
      << "the third sequence ran after the first batch, not beside it";
}

TEST(Cli, Chapter3BudgetTooSmallForOneSequenceExitsOne) {
  // 0.01 MB is one block of 16 (8192 B): a sequence of 1 + 39 positions needs 3.
  const auto r = run_program("ch03_paged_blocks", {"--model", "tiny", "--kv-budget-mb", "0.01",
                                                   "--max-new-tokens", "40", "--no-peak"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r,
                        "holds 1 blocks of 16 tokens (0.008192 MB each), fewer than the 3 "
                        "blocks one sequence of 40 tokens needs");
  // Below one block, the message says so rather than "0 blocks, fewer than ..."
  const auto none =
      run_program("ch03_paged_blocks", {"--model", "tiny", "--kv-budget-mb", "0.001", "--no-peak"});
  EXPECT_EQ(none.exit_code, 1);
  expect_one_line_error(none, "KV budget of 0.001 MB does not hold one block of 16 tokens");
}

// The pool is sized for what a sequence stores, prompt + new - 1 positions: a prompt that fills
// tiny's 96-position context but one, plus one new token, fits, as it does in chapters 1 and 2.
TEST(Cli, Chapter3AdmitsAGenerationThatEndsAtTheContext) {
  std::string ids = "1";
  for (int i = 1; i < 96; ++i) ids += ",1";
  for (const char* chapter : {kCh01, "ch03_paged_blocks"}) {
    const auto r = run_program(chapter, {"--model", "tiny", "--prompt-ids", ids, "--max-new-tokens",
                                         "1", "--ignore-eos", "--json", "--no-peak"});
    ASSERT_EQ(r.exit_code, 0) << chapter << ": " << r.err;
    EXPECT_TRUE(nlohmann::json::accept(r.out)) << chapter << ": " << r.out;
  }
}

// Flags that would be silently ignored together are refused, and counts too large to serve are
// usage errors, not out-of-memory failures.
TEST(Cli, Chapter3RefusesFlagsThatContradictEachOther) {
  const test::TempDir tmp;
  const std::string file = tmp.file("prompts.txt");
  { std::ofstream(file) << "1,5\n"; }
  const std::vector<std::vector<std::string>> cases = {
      {"--prompts", file, "--num-seqs", "7"},
      {"--prompts", file, "--prompt-ids", "5"},
      {"--pool-map-every", "1"},
      {"--num-seqs", "2147483647"},
  };
  for (const auto& extra : cases) {
    std::vector<std::string> args = {"--model", "tiny", "--no-peak"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_program("ch03_paged_blocks", args);
    EXPECT_EQ(r.exit_code, 2) << extra[0] << " " << extra[1];
    expect_one_line_error(r, extra[0] == "--pool-map-every" ? "--pool-map" : extra[0]);
  }
}

// A prompts file written on Windows reads the same, and a bad line is named by its number.
TEST(Cli, Chapter3PromptsFileLinesAreNamed) {
  const test::TempDir tmp;
  const std::string file = tmp.file("prompts.txt");
  { std::ofstream(file, std::ios::binary) << "1,5\r\n1,9\r\n"; }
  const auto ok = run_program(
      "ch03_paged_blocks",
      {"--model", "tiny", "--prompts", file, "--max-new-tokens", "2", "--json", "--no-peak"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(nlohmann::json::parse(ok.out)["sequences"][1]["prompt_ids"], nlohmann::json({1, 9}));
  { std::ofstream(file) << "1,5\n1,x\n"; }
  const auto bad =
      run_program("ch03_paged_blocks", {"--model", "tiny", "--prompts", file, "--no-peak"});
  EXPECT_EQ(bad.exit_code, 1);
  expect_one_line_error(bad, "line 2");
  const auto dir = run_program("ch03_paged_blocks",
                               {"--model", "tiny", "--prompts", tmp.path().string(), "--no-peak"});
  EXPECT_EQ(dir.exit_code, 1);
  expect_one_line_error(dir, "is a directory, not a regular file");
}

// CLI11 alone reads an empty value as 0 (or as not given) and wraps -1 for an unsigned option;
// kvheap refuses both.
TEST(Cli, EmptyAndNegativeNumbersExitTwo) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--max-new-tokens", ""}, {"--top-p", " "},
      {"--seed", "-1"},         {"--seed", "99999999999999999999"},
      {"--kv-budget-mb", ""},   {"--prompt", ""},
      {"--tokenizer", ""}};
  for (const auto& [flag, value] : cases) {
    const auto r = run_program(kCh01, {"--model", "tiny", flag, value, "--no-peak"});
    EXPECT_EQ(r.exit_code, 2) << flag << " '" << value << "'";
    expect_one_line_error(r, flag);
  }
}

// Every chapter reads --kv-budget-mb the same way: NaN, infinity and a budget under one byte
// (which would read as 0, the default) are usage errors.
TEST(Cli, KvBudgetThatIsNotABudgetExitsTwoInEveryChapter) {
  for (const char* chapter :
       {kCh01, "ch02_contiguous_gpu", "ch03_paged_blocks", "ch04_cow_prefix_sharing"}) {
    for (const char* mb : {"nan", "1e-7"}) {
      const auto r = run_program(
          chapter, {"--model", "tiny", "--device", "cpu", "--kv-budget-mb", mb, "--no-peak"});
      EXPECT_EQ(r.exit_code, 2) << chapter << " --kv-budget-mb " << mb;
      expect_one_line_error(r, "--kv-budget-mb");
    }
  }
  for (const char* chapter :
       {"ch02_contiguous_gpu", "ch03_paged_blocks", "ch04_cow_prefix_sharing"}) {
    const auto r = run_program(
        chapter, {"--model", "tiny", "--device", "cpu", "--kv-budget-mb", "inf", "--no-peak"});
    EXPECT_EQ(r.exit_code, 2) << chapter << " --kv-budget-mb inf";
    expect_one_line_error(r, "--kv-budget-mb");
  }
}

// Decoded text can end inside a multi-byte character (byte tokens, or a generation cut short);
// --json then marks the bad bytes instead of failing after the whole run.
TEST(Cli, JsonLineReplacesInvalidUtf8) {
  const std::string text = json_line({{"text", std::string("ok \xD3 end")}, {"n", 1}});
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["text"], "ok \xEF\xBF\xBD end");  // U+FFFD in UTF-8
  EXPECT_EQ(text.find('\n'), std::string::npos);
}

TEST(Cli, HelpExitsZero) {
  const auto r = run_program(kCh01, {"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--kv-budget-mb"), std::string::npos);
}

TEST(Cli, KvCalculatorPrintsTheNapkinMath) {
  const auto r = run_program("ch01_kv_calculator", {"--model", "llama-3-8b", "--kv-dtype", "bf16",
                                                    "--context", "1024", "--memory-gb", "80"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("= 131072 B"), std::string::npos) << r.out;
  // 80e9 - 16.06e9 of weights = 63.94e9 for KV: 59 reservations of 1.07 GB, 476 of 134 MB.
  EXPECT_NE(r.out.find("reserving max_seq_len : 59"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1024 tokens: 476"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kvheap
