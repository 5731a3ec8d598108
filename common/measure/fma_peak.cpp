#include "common/measure/fma_peak.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>

namespace kvheap {

namespace {

// The widest vector the CPU attention twin computes in: 16 floats where the target has AVX-512
// (kernels/decode_attention_simd.hpp), else 8; the compiler maps it onto the target's vector
// registers.
#if defined(__AVX512F__)
constexpr int kWidth = 16;
#else
constexpr int kWidth = 8;
#endif
using Vec = float __attribute__((vector_size(kWidth * sizeof(float))));

constexpr int kChains = 12;        // independent accumulators: more than latency x units in flight
constexpr long kSteps = 1L << 23;  // about 30 ms at 3 G multiply-adds per second

// Multiply-adds per thread: kSteps x kChains vectors of kWidth.
float run_chains(float m, float c) {
  Vec acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = Vec{} + static_cast<float>(j);
  const Vec vm = Vec{} + m, vc = Vec{} + c;
  for (long i = 0; i < kSteps; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = acc[j] * vm + vc;
  float total = 0.0f;
  for (const Vec& a : acc)
    for (int l = 0; l < kWidth; ++l) total += a[l];
  return total;
}

}  // namespace

FmaSample measure_fma_peak(int repeats) {
  FmaSample s;
  s.threads = omp_get_max_threads();
  // Runtime values, so that the compiler cannot fold the chains away.
  volatile float m = 0.999999f, c = 1e-7f;
  volatile float sink = 0.0f;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0.0f;
#pragma omp parallel reduction(+ : total)
    total += run_chains(m, c);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    const double flops = 2.0 * kWidth * kChains * static_cast<double>(kSteps) * s.threads;
    s.gflops = std::max(s.gflops, flops / sec / 1e9);
  }
  return s;
}

}  // namespace kvheap
