// bench_tokenizer: how fast the BPE tokenizers encode English text, on one core.
//
// Text: the files under /usr/share/common-licenses (Debian's base-files package: GPL, Apache,
// Artistic, MPL...) in name order, symbolic links left out, each followed by a newline, repeated
// to exactly 1 MiB: the text scripts/make_tokenizer_testdata.py timed the reference libraries on.
// Vocabularies: the committed test data (tests/data/tokenizers): Qwen's first 16384 ranks as a
// tokenizer.json and as a Llama 3 tiktoken file, and 9295 pieces of Mistral's SentencePiece v1
// vocabulary. The rate is MB of UTF-8 text per second; kvheap's goal is 5 MB/s. The label gives
// the reference library's rate on the same text and vocabulary, measured once by the script.
//
//   build/cpu/bench/bench_tokenizer
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/tokenizer/bpe_tokenizer.hpp"
#include "common/tokenizer/tiktoken_file.hpp"
#include "common/tokenizer/tokenizer_json.hpp"
#include "tests/support/source_tree.hpp"

namespace {

namespace fs = std::filesystem;
using kvheap::BpeTokenizer;

const std::string kData =
    (kvheap::test::source_dir() / "tests" / "data" / "tokenizers").string() + "/";

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The benchmark's text, or "" when the licenses folder is missing.
std::string build_license_text() {
  std::string out;
  const fs::path folder = "/usr/share/common-licenses";
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return out;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(folder))
    if (!e.is_symlink() && e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string one;
  for (const fs::path& p : files) one += read_file(p) + "\n";
  if (one.empty()) return out;
  out.reserve((std::size_t{1} << 20) + one.size());
  while (out.size() < (std::size_t{1} << 20)) out.append(one);
  out.resize(std::size_t{1} << 20);
  return out;
}

const std::string& license_text() {
  static const std::string text = build_license_text();
  return text;
}

std::string reference_rate(const std::string& library) {
  const nlohmann::json ref = nlohmann::json::parse(read_file(kData + "reference.json"));
  const auto& rates = ref.at("reference_rates_mb_per_s");
  return rates.contains(library)
             ? fmt::format("{}: {} MB/s", library, rates.at(library).get<double>())
             : std::string();
}

void encode(benchmark::State& state, const std::unique_ptr<BpeTokenizer>& (*load)(),
            const std::string& reference) {
  const std::string& text = license_text();
  if (text.empty()) {
    state.SkipWithError("/usr/share/common-licenses is missing (Debian's base-files)");
    return;
  }
  const BpeTokenizer& tok = *load();
  std::size_t tokens = 0;
  for (auto _ : state) {
    const std::vector<int> ids = tok.encode(text, false);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["bytes/token"] = static_cast<double>(text.size()) / static_cast<double>(tokens);
  state.SetLabel(reference.empty() ? "" : "reference " + reference_rate(reference));
}

const std::unique_ptr<BpeTokenizer>& qwen() {
  static const auto t = kvheap::load_tokenizer_json(kData + "qwen16k.tokenizer.json");
  return t;
}
const std::unique_ptr<BpeTokenizer>& llama3() {
  static const auto t = kvheap::load_tiktoken(kData + "qwen16k.tiktoken");
  return t;
}
const std::unique_ptr<BpeTokenizer>& mistral() {
  static const auto t = kvheap::load_tokenizer_json(kData + "mistral_subset.tokenizer.json");
  return t;
}

BENCHMARK_CAPTURE(encode, qwen2_tokenizer_json_1MiB, qwen, "tokenizers (qwen2 tokenizer.json)")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode, llama3_tiktoken_1MiB, llama3, "tiktoken (llama3 pattern)")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode, mistral_tokenizer_json_1MiB, mistral,
                  "tokenizers (mistral tokenizer.json)")
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
