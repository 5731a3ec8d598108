// Replays every fuzz input kvheap keeps through the same entry functions the libFuzzer programs
// call: the seed corpus (fuzz/corpus/<target>/) and each input that once crashed a target
// (fuzz/regressions/<target>/). It runs in every build, gcc included, so the entry points and
// their oracles are exercised by ordinary CI even where libFuzzer is not available.
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "fuzz/entry_points.hpp"
#include "tests/support/source_tree.hpp"

namespace kvheap {

// Test names and failure messages show the target's name rather than its bytes.
void PrintTo(const FuzzTarget& t, std::ostream* os) { *os << t.name; }
void PrintTo(FuzzOutcome o, std::ostream* os) {
  *os << (o == FuzzOutcome::Accepted ? "Accepted" : "Rejected");
}

namespace {

namespace fs = std::filesystem;

// Files of fuzz/<kind>/<target>/, sorted so failures are reported in a stable order. A folder
// that does not exist (no regression found yet) holds no files.
std::vector<fs::path> inputs(const std::string& kind, const std::string& target) {
  const fs::path dir = test::source_dir() / "fuzz" / kind / target;
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs one input; a thrown exception (an oracle's logic_error, or any non-kvheap error the entry
// point let through) becomes a test failure that names the file.
FuzzOutcome replay(const FuzzTarget& target, const fs::path& file, std::string* why = nullptr) {
  const std::vector<std::uint8_t> bytes = read_all(file);
  try {
    return target.run(bytes, why);
  } catch (const std::exception& e) {
    ADD_FAILURE() << target.name << " on " << file << " threw: " << e.what();
  } catch (...) {
    ADD_FAILURE() << target.name << " on " << file << " threw a non-std exception";
  }
  return FuzzOutcome::Rejected;
}

class FuzzReplay : public ::testing::TestWithParam<FuzzTarget> {};

TEST_P(FuzzReplay, EverySeedReturnsNormally) {
  const auto files = inputs("corpus", GetParam().name);
  ASSERT_FALSE(files.empty()) << "no seeds in fuzz/corpus/" << GetParam().name
                              << "; regenerate them with fuzz_make_seeds";
  for (const fs::path& f : files) (void)replay(GetParam(), f);
}

// Seeds named valid_* are the generator's well-formed files: if one is rejected, either the
// generator or the target's input format drifted, and the fuzzer would start from garbage.
TEST_P(FuzzReplay, ValidSeedsAreAccepted) {
  int valid = 0;
  for (const fs::path& f : inputs("corpus", GetParam().name)) {
    if (f.filename().string().rfind("valid_", 0) != 0) continue;
    ++valid;
    std::string why;
    EXPECT_EQ(replay(GetParam(), f, &why), FuzzOutcome::Accepted) << f << " was rejected: " << why;
  }
  EXPECT_GT(valid, 0) << "fuzz/corpus/" << GetParam().name << " has no valid_* seed";
}

TEST_P(FuzzReplay, EveryPastCrashReturnsNormally) {
  for (const fs::path& f : inputs("regressions", GetParam().name)) (void)replay(GetParam(), f);
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplay,
                         ::testing::ValuesIn(fuzz_targets().begin(), fuzz_targets().end()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvheap
