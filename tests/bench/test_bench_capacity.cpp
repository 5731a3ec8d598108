// bench_capacity as a program: its table's properties on a small workload, and its answers to bad
// flags. Part of the test_bench program (built where the benchmarks are).
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <utility>
#include <string>
#include <vector>

#include "tests/support/run_program.hpp"

namespace kvheap {
namespace {

// The program, in the build folder's bench/ beside the bin/ that run_program starts from.
const char* kCapacity = "../bench/bench_capacity";

struct Row {
  int block_size = 0, contiguous = 0, paged = 0;
  std::string ratio;  // "1.07", ">=1.07", "<=0.37" or "-"
  double waste_contiguous = 0, waste_paged = 0;
};

/// The table's rows: "| bs | contiguous | paged | ratio | waste c % | waste p % |".
std::vector<Row> rows_of(const std::string& out) {
  std::vector<Row> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.size() < 2 || line[0] != '|' || line[2] < '0' || line[2] > '9') continue;
    std::replace(line.begin(), line.end(), '|', ' ');
    std::istringstream cells(line);
    Row r;
    cells >> r.block_size >> r.contiguous >> r.paged >> r.ratio >> r.waste_contiguous >>
        r.waste_paged;
    EXPECT_FALSE(cells.fail()) << line;
    rows.push_back(r);
  }
  return rows;
}

TEST(BenchCapacity, EveryBlockSizeAndOneTokenBlocksWasteNothing) {
  const auto r = test::run_program(kCapacity, {"--model", "tiny", "--budget-gib", "0.01",
                                               "--requests", "3000", "--max-len", "96"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<Row> rows = rows_of(r.out);
  ASSERT_EQ(rows.size(), 9u) << r.out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].block_size, 1 << i);
    // Reservation does not depend on the block size.
    EXPECT_EQ(rows[i].contiguous, rows[0].contiguous);
    EXPECT_GT(rows[i].waste_contiguous, 0.0);
  }
  // One-token blocks hold exactly the tokens, so they admit at least what max_len reservations do.
  EXPECT_EQ(rows[0].waste_paged, 0.0);
  EXPECT_GE(rows[0].paged, rows[0].contiguous);
  // Blocks larger than every request (max_len 96) strand most of each one.
  EXPECT_LT(rows.back().paged, rows[0].paged);
  EXPECT_GT(rows.back().waste_paged, 50.0);
}

TEST(BenchCapacity, ARatioIsMarkedAsABoundWhenAPolicyRanOutOfRequests) {
  // Tiny in bf16 at 0.01 GiB reserves 436 slots of 96 positions; 450 requests exhaust paging at
  // small blocks (it holds more) but not at large ones.
  auto r = test::run_program(kCapacity, {"--model", "tiny", "--budget-gib", "0.01", "--requests",
                                         "450", "--max-len", "96"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<Row> rows = rows_of(r.out);
  ASSERT_EQ(rows.size(), 9u) << r.out;
  int lower_bounds = 0;
  for (const Row& row : rows) {
    ASSERT_LT(row.contiguous, 450) << r.out;
    if (row.paged == 450) {
      EXPECT_EQ(row.ratio.substr(0, 2), ">=") << r.out;
      ++lower_bounds;
    } else {
      EXPECT_TRUE(!row.ratio.empty() && row.ratio[0] >= '0' && row.ratio[0] <= '9') << r.out;
    }
  }
  EXPECT_GT(lower_bounds, 0) << r.out;
  EXPECT_LT(lower_bounds, 9) << r.out;
  EXPECT_NE(r.out.find("admitted all 450 requests"), std::string::npos) << r.out;

  // 400 requests: reservation admits them all; paging too at small blocks, not at 256.
  r = test::run_program(kCapacity, {"--model", "tiny", "--budget-gib", "0.01", "--requests", "400",
                                    "--max-len", "96"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  rows = rows_of(r.out);
  ASSERT_EQ(rows.size(), 9u) << r.out;
  EXPECT_EQ(rows.front().ratio, "-") << r.out;
  EXPECT_EQ(rows.back().contiguous, 400) << r.out;
  EXPECT_LT(rows.back().paged, 400) << r.out;
  EXPECT_EQ(rows.back().ratio.substr(0, 2), "<=") << r.out;

  // 50 requests: both policies admit them all, at every block size, and no ratio is given.
  r = test::run_program(kCapacity, {"--model", "tiny", "--budget-gib", "0.1", "--requests", "50"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  rows = rows_of(r.out);
  ASSERT_EQ(rows.size(), 9u) << r.out;
  for (const Row& row : rows) {
    EXPECT_EQ(row.paged, 50);
    EXPECT_EQ(row.contiguous, 50);
    EXPECT_EQ(row.ratio, "-");
  }
}

TEST(BenchCapacity, RefusesImpossibleSettings) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--budget-gib", "0.001"}, "fewer than one block of 256 tokens"},
      {{"--budget-gib", "nan"}, "--budget-gib must be a finite number > 0"},
      {{"--budget-gib", "-1"}, "--budget-gib must be a finite number > 0"},
      {{"--model", "tiny", "--budget-gib", "100"}, "at most 134217728 (2^27) tokens"},
      {{"--max-len", "99999"}, "--max-len must be in [1, max_seq_len = 8192]"},
      {{"--requests", "0"}, "--requests must be in [1, 10000000]"},
      {{"--sigma", "0"}, "--sigma must be a finite number > 0, got 0"},
      {{"--mean", "nan"}, "--mean must be a finite number of tokens > 0, got nan"},
      {{"--kv-dtype", "int8"}, "unknown dtype 'int8'"},
      {{"--bogus"}, "--bogus"},
  };
  for (const auto& [args, needle] : cases) {
    const auto r = test::run_program(kCapacity, args);
    EXPECT_EQ(r.exit_code, 2) << args[0];
    test::expect_one_line_error(r, needle);
  }
}

}  // namespace
}  // namespace kvheap
