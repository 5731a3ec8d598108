// CPU SwiGLU and residual add.
//
// silu takes an exponential per element. Written as a loop of std::exp, it calls the C library
// once per element, which no compiler vectorises without -ffast-math; Eigen's array exp is its
// vectorised polynomial, within 2 ulps of std::exp (bench/bench_swiglu_cpu.cpp times the two).
#include "kernels/swiglu.hpp"

#include <Eigen/Core>
#include <algorithm>

#include "kernels/cpu_threads.hpp"

namespace kvheap::cpu {

namespace {

/// Elements per piece of work: a multiple of every vector width.
constexpr long kPiece = 4096;

}  // namespace

void swiglu(float* gate, const float* up, long count) {
  const long pieces = (count + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (count >= kParallelElements)
  for (long p = 0; p < pieces; ++p) {
    const long begin = p * kPiece, n = std::min(kPiece, count - begin);
    Eigen::Map<Eigen::ArrayXf> g(gate + begin, n);
    const Eigen::Map<const Eigen::ArrayXf> u(up + begin, n);
    g = g / (1.0f + (-g).exp()) * u;
  }
}

void residual_add(float* x, const float* delta, long count) {
#pragma omp parallel for schedule(static) if (count >= kParallelElements)
  for (long i = 0; i < count; ++i) x[i] += delta[i];
}

}  // namespace kvheap::cpu
