// The workload format (common/program/workload.hpp): what it reads, that what it writes reads back
// the same, and that every malformed line is refused with its line number and the field at fault.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.hpp"
#include "common/model/model_config.hpp"
#include "common/tokenizer/llama2c_tokenizer.hpp"
#include "common/program/workload.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

ModelConfig tiny() { return preset("tiny"); }  // 128 ids, 96 positions

TEST(Workload, ReadsIdsLengthsStopsAndArrivals) {
  const std::string text =
      "{\"prompt_ids\": [1, 5, 9], \"max_new_tokens\": 4, \"arrival_s\": 0.25}\n"
      "\n"
      "{\"prompt_ids\": [1], \"stop_ids\": [7, 8], \"arrival_s\": 0.5}\r\n"
      "{\"prompt_ids\": [1, 2]}\n";  // no arrival: with the line before
  const std::vector<Request> w = parse_workload(text, "w.jsonl", tiny(), nullptr, 12);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].prompt, (std::vector<int>{1, 5, 9}));
  EXPECT_EQ(w[0].max_new_tokens, 4);
  EXPECT_DOUBLE_EQ(w[0].arrival_seconds, 0.25);
  EXPECT_EQ(w[1].max_new_tokens, 12) << "no max_new_tokens: the default";
  EXPECT_EQ(w[1].stop_ids, (std::vector<int>{7, 8}));
  EXPECT_DOUBLE_EQ(w[2].arrival_seconds, 0.5);
  const std::vector<Request> steps = parse_workload(
      "{\"prompt_ids\": [1], \"arrival_step\": 3}\n{\"prompt_ids\": [1]}", "s", tiny(), nullptr, 2);
  EXPECT_LT(steps[0].arrival_seconds, 0) << "step arrivals do not use the clock";
  EXPECT_EQ(steps[1].arrival_step, 3);
}

TEST(Workload, WhatItWritesReadsBackTheSame) {
  std::vector<Request> w(4);
  w[0].prompt = {1, 2, 3};
  w[0].max_new_tokens = 5;
  w[0].arrival_seconds = 0;
  w[1].prompt = {1, 127};
  w[1].max_new_tokens = 0;
  w[1].stop_ids = {2, 9};
  w[1].arrival_seconds = 0.125;
  w[2].prompt = {1};
  w[2].max_new_tokens = 95;
  w[2].arrival_seconds = 1.0 / 3.0;  // a double that needs every digit
  w[3].prompt = {1, 1, 1};
  w[3].max_new_tokens = 1;
  w[3].arrival_seconds = 86400.0;  // the latest arrival allowed
  std::string text;
  for (const Request& r : w) text += workload_line(r) + "\n";
  const std::vector<Request> back = parse_workload(text, "round trip", tiny(), nullptr, 64);
  ASSERT_EQ(back.size(), w.size()) << text;
  for (std::size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(back[i].prompt, w[i].prompt) << i;
    EXPECT_EQ(back[i].max_new_tokens, w[i].max_new_tokens) << i;
    EXPECT_EQ(back[i].stop_ids, w[i].stop_ids) << i;
    EXPECT_EQ(back[i].arrival_seconds, w[i].arrival_seconds) << i;
  }
  Request step;
  step.prompt = {1, 4};
  step.max_new_tokens = 2;
  step.arrival_step = 7;
  const std::vector<Request> s = parse_workload(workload_line(step), "steps", tiny(), nullptr, 1);
  EXPECT_EQ(s[0].arrival_step, 7);
  EXPECT_LT(s[0].arrival_seconds, 0);
}

TEST(Workload, TextPromptsAreEncodedWithBos) {
  KVHEAP_REQUIRE_MODEL(path, "tokenizer.bin");
  const Llama2cTokenizer tok = Llama2cTokenizer::load(path, 32000);
  ModelConfig c = tiny();
  c.vocab_size = 32000;
  const std::vector<Request> w =
      parse_workload("{\"prompt\": \"Once upon a time\", \"max_new_tokens\": 2}", "t", c, &tok, 1);
  EXPECT_EQ(w[0].prompt, tok.encode("Once upon a time", true));
  EXPECT_EQ(w[0].prompt.front(), Llama2cTokenizer::kBos);
}

struct BadLine {
  const char* text;   // the file: the bad line is the last one
  const char* error;  // what the message must say besides the line number
};

TEST(Workload, EveryMalformedLineIsNamedWithItsField) {
  const std::string good = "{\"prompt_ids\": [1], \"arrival_s\": 1}\n";
  const BadLine cases[] = {
      {"[1, 2]", "not a JSON object"},
      {"{\"prompt_ids\": [1]", "not a JSON object"},
      {"{\"prompt_ids\": [1], \"max_new_token\": 3}", "unknown field 'max_new_token'"},
      {"{\"max_new_tokens\": 3}", "give the prompt once"},
      {"{\"prompt_ids\": [1], \"prompt\": \"x\"}", "give the prompt once"},
      {"{\"prompt_ids\": []}", "'prompt_ids' is empty"},
      {"{\"prompt_ids\": \"1,2\"}", "'prompt_ids' must be a list"},
      {"{\"prompt_ids\": [1, 128]}",
       "'prompt_ids' element 2 is 128; expected a token id from 0 to 127"},
      {"{\"prompt_ids\": [1, -1]}", "'prompt_ids' element 2 is -1"},
      {"{\"prompt_ids\": [1, 2.5]}", "'prompt_ids' element 2 is 2.5"},
      {"{\"prompt\": \"hello\"}", "needs --tokenizer"},
      {"{\"prompt\": 5}", "'prompt' must be some text"},
      {"{\"prompt_ids\": [1], \"max_new_tokens\": -1}", "'max_new_tokens' must be from 0 to 96"},
      {"{\"prompt_ids\": [1], \"max_new_tokens\": \"4\"}", "'max_new_tokens' must be an integer"},
      {"{\"prompt_ids\": [1], \"max_new_tokens\": 97}", "'max_new_tokens' must be from 0 to 96"},
      {"{\"prompt_ids\": [1, 2, 3], \"max_new_tokens\": 95}",
       "'max_new_tokens' 95 runs past the context: the prompt uses 3 of 96 positions"},
      {"{\"prompt_ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, "
       "21, 22, "
       "23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, "
       "45, "
       "46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, "
       "68, "
       "69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, "
       "91, "
       "92, 93, 94]}",
       "--max-new-tokens (the line gives no 'max_new_tokens') 4 runs past the context"},
      {"{\"prompt_ids\": [1], \"stop_ids\": [200]}", "'stop_ids' element 1 is 200"},
      {"{\"prompt_ids\": [1], \"arrival_s\": -0.5}", "'arrival_s' must be a number of seconds"},
      {"{\"prompt_ids\": [1], \"arrival_s\": \"soon\"}", "'arrival_s' must be a number"},
      {"{\"prompt_ids\": [1], \"arrival_s\": 86400.5}",
       "'arrival_s' is 86400.5 s; an arrival must be at most 86400 s (a day)"},
      {"{\"prompt_ids\": [1], \"arrival_s\": 1e308}", "an arrival must be at most 86400 s"},
      {"{\"prompt_ids\": [1], \"arrival_s\": 0.5}", "arrivals must not decrease"},
      {"{\"prompt_ids\": [1], \"arrival_step\": 2}", "arrivals of both kinds"},
      {"{\"prompt_ids\": [1], \"arrival_s\": 2, \"arrival_step\": 2}", "give one arrival"},
  };
  for (const BadLine& c : cases) {
    const std::string text = good + c.text + "\n";
    try {
      (void)parse_workload(text, "bad.jsonl", tiny(), nullptr, 4);
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("--workload 'bad.jsonl' line 2: "), std::string::npos) << what;
      EXPECT_NE(what.find(c.error), std::string::npos) << c.text << "\n" << what;
    }
  }
  EXPECT_THROW((void)parse_workload("\n \n", "empty", tiny(), nullptr, 4), InputError);
  EXPECT_THROW((void)load_workload("/nonexistent/w.jsonl", tiny(), nullptr, 4), InputError);
}

}  // namespace
}  // namespace kvheap
