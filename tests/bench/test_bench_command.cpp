// The benchmarks' reading of their own command line: whether a run only lists the benchmarks,
// decided as Google Benchmark decides it, so that a listing skips the peak measurements and the
// tables around the runs (cmake/check_bench_listing.cmake checks each program's listing).
#include <gtest/gtest.h>
#include <stdlib.h>  // setenv, unsetenv (POSIX)

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/support/command.hpp"

namespace kvheap {
namespace {

/// argv for a command line: the strings stay owned by the vector of std::string.
struct Argv {
  explicit Argv(std::vector<std::string> args) : args_(std::move(args)) {
    for (std::string& a : args_) ptrs_.push_back(a.data());
  }
  int argc() const { return static_cast<int>(ptrs_.size()); }
  char** argv() { return ptrs_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> ptrs_;
};

bool listing(std::vector<std::string> args) {
  args.insert(args.begin(), "bench_x");
  Argv a(std::move(args));
  return bench::listing_only(a.argc(), a.argv());
}

/// Unsets BENCHMARK_LIST_TESTS for a test and restores it after.
class ListingOnly : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* v = std::getenv("BENCHMARK_LIST_TESTS")) saved_ = v;
    unsetenv("BENCHMARK_LIST_TESTS");
  }
  void TearDown() override {
    if (saved_)
      setenv("BENCHMARK_LIST_TESTS", saved_->c_str(), 1);
    else
      unsetenv("BENCHMARK_LIST_TESTS");
  }
  std::optional<std::string> saved_;
};

TEST(TruthyFlagValue, ReadsValuesAsGoogleBenchmarkDoes) {
  for (const char* v : {"", "1", "t", "T", "y", "x", "true", "TRUE", "yes", "on", "2"})
    EXPECT_TRUE(bench::truthy_flag_value(v)) << "'" << v << "'";
  for (const char* v : {"0", "f", "F", "n", "N", "-", "false", "False", "no", "NO", "off", "Off"})
    EXPECT_FALSE(bench::truthy_flag_value(v)) << "'" << v << "'";
}

TEST_F(ListingOnly, TheFlagBareOrWithAValue) {
  EXPECT_FALSE(listing({}));
  EXPECT_FALSE(listing({"--benchmark_filter=paged", "--sweep-out=x"}));
  EXPECT_TRUE(listing({"--benchmark_list_tests"}));
  EXPECT_TRUE(listing({"--benchmark_filter=paged", "--benchmark_list_tests=true"}));
  EXPECT_FALSE(listing({"--benchmark_list_tests=false"}));
  // Another flag that begins alike is not this one.
  EXPECT_FALSE(listing({"--benchmark_list_tests_x=true"}));
}

TEST_F(ListingOnly, TheLastFlagWins) {
  EXPECT_FALSE(listing({"--benchmark_list_tests", "--benchmark_list_tests=0"}));
  EXPECT_TRUE(listing({"--benchmark_list_tests=no", "--benchmark_list_tests=1"}));
}

TEST_F(ListingOnly, TheEnvironmentUnlessTheCommandLineSaysOtherwise) {
  setenv("BENCHMARK_LIST_TESTS", "1", 1);
  EXPECT_TRUE(listing({}));
  EXPECT_FALSE(listing({"--benchmark_list_tests=false"}));
  setenv("BENCHMARK_LIST_TESTS", "false", 1);
  EXPECT_FALSE(listing({}));
  EXPECT_TRUE(listing({"--benchmark_list_tests"}));
}

TEST(FlagValue, TheValueOfTheFirstMatchingFlagElseTheFallback) {
  Argv a({"bench_x", "--sweep-out=a", "--sweep-outx=b", "--sweep-out=c"});
  EXPECT_EQ(bench::flag_value(a.argc(), a.argv(), "sweep-out", "z"), "a");
  EXPECT_EQ(bench::flag_value(a.argc(), a.argv(), "huge-pages", "1"), "1");
}

TEST(CommandLine, ProgramWithoutItsFolderThenTheArguments) {
  Argv a({"/some/dir/bench_x", "--flag=1", "x"});
  EXPECT_EQ(bench::command_line(a.argc(), a.argv()), "bench_x --flag=1 x");
}

}  // namespace
}  // namespace kvheap
