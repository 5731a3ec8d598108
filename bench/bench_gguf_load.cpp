// bench_gguf_load: how long a GGUF model takes to load, on all threads: the file parsed and
// mapped, every tensor dequantized to fp32, every weight checked finite, as `--model` does. And
// the tokenizer built from the same file's metadata, as the programs build it.
//
// Model: SmolLM2-135M-Instruct.Q4_1.gguf from KVHEAP_MODELS_DIR (or the model cache;
// scripts/fetch-model.sh smollm2), or a file named by KVHEAP_GGUF. The goal is under 2 s on 2
// cores. Counters: the file's bytes and the fp32 bytes written, and GB/s of the latter.
//
//   build/cpu/bench/bench_gguf_load
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/tokenizer/gguf_tokenizer.hpp"
#include "common/model/model_loader.hpp"

namespace {

/// The file to load, or "" (and a skip) when there is none.
std::string model_path(benchmark::State& state) {
  if (const char* env = std::getenv("KVHEAP_GGUF"); env != nullptr && *env != '\0') return env;
  try {
    return kvheap::resolve_model_name("smollm2");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return "";
  }
}

void BM_LoadModel(benchmark::State& state) {
  const std::string path = model_path(state);
  if (path.empty()) return;
  double params = 0;
  for (auto _ : state) {
    const kvheap::ModelWeights w = kvheap::load_model(path);
    params = static_cast<double>(w.config.num_parameters());
    benchmark::DoNotOptimize(w.token_embedding);
  }
  const double file = static_cast<double>(std::filesystem::file_size(path));
  state.counters["file_MB"] = file / 1e6;
  state.counters["fp32_MB"] = params * 4 / 1e6;
  state.counters["fp32_GBps"] =
      benchmark::Counter(params * 4 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LoadModel)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void BM_LoadTokenizer(benchmark::State& state) {
  const std::string path = model_path(state);
  if (path.empty()) return;
  for (auto _ : state) benchmark::DoNotOptimize(kvheap::load_gguf_tokenizer(path));
}
BENCHMARK(BM_LoadTokenizer)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
