// bench_swiglu_cpu: SwiGLU on the CPU, kvheap's kernel (kernels/swiglu_cpu.cpp) against the
// textbook loop of std::exp, which calls the C library once per element because no compiler
// vectorises it without -ffast-math. One thread, over the gate of one layer's MLP for a prompt of
// 128 rows and for one decode row of stories110m (hidden_dim 2048); the arrays stay in the core's
// caches. Each call gets a fresh copy of the gate (SwiGLU works in place) and only the call is
// timed. The counter is elements per second; the two names sort side by side.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/swiglu.hpp"

namespace kvheap {
namespace {

void plain_loop(float* gate, const float* up, long count) {
  for (long i = 0; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

template <void (*F)(float*, const float*, long)>
void swiglu(benchmark::State& state) {
  const long count = state.range(0);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> gate(static_cast<std::size_t>(count)), up(gate.size()), work(gate.size());
  for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = nd(rng), up[i] = nd(rng);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  for (auto _ : state) {
    std::copy(gate.begin(), gate.end(), work.begin());
    const auto t0 = std::chrono::steady_clock::now();
    F(work.data(), up.data(), count);
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    benchmark::DoNotOptimize(work.data());
  }
  omp_set_num_threads(saved);
  state.counters["elements_per_s"] =
      benchmark::Counter(static_cast<double>(count) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

BENCHMARK(swiglu<cpu::swiglu>)->Name("swiglu/kvheap")->Arg(2048)->Arg(128 * 2048)->UseManualTime();
BENCHMARK(swiglu<plain_loop>)
    ->Name("swiglu/plain_loop")
    ->Arg(2048)
    ->Arg(128 * 2048)
    ->UseManualTime();

}  // namespace
}  // namespace kvheap

BENCHMARK_MAIN();
