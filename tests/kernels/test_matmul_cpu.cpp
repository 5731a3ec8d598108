// The CPU matrix product (kernels/matmul.hpp): against a double-precision product over awkward
// shapes on both of its paths, and, for batches of up to kDotRows rows, bitwise the same for a
// row whatever else is in its batch and however many threads run it.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/matmul.hpp"

namespace kvheap {
namespace {

using cpu::kDotRows;

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

/// out = x W^T with `threads` OpenMP threads.
std::vector<float> product(const std::vector<float>& x, const std::vector<float>& w, int n,
                           int in_dim, int out_dim, int threads) {
  std::vector<float> out(static_cast<std::size_t>(n) * out_dim, -1.0f);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  cpu::matmul(out.data(), x.data(), w.data(), n, in_dim, out_dim);
  omp_set_num_threads(saved);
  return out;
}

// Sizes that leave tails (in_dim not a multiple of the packet width, out_dim not a multiple of
// the weight rows a block takes) and some that do not, batches around kDotRows (both paths), and
// products large enough to run on several threads, one row among them.
TEST(MatmulCpu, MatchesDoublePrecisionOnAwkwardShapes) {
  struct Shape {
    int n, in_dim, out_dim;
  };
  for (const Shape s : {Shape{1, 1, 1}, Shape{1, 7, 3}, Shape{3, 33, 17}, Shape{5, 288, 9},
                        Shape{8, 100, 64}, Shape{kDotRows, 31, 13}, Shape{kDotRows + 1, 31, 13},
                        Shape{40, 257, 35}, Shape{7, 1000, 301}, Shape{1, 1000, 301}}) {
    const auto x = random_floats(static_cast<std::size_t>(s.n) * s.in_dim, 1);
    const auto w = random_floats(static_cast<std::size_t>(s.out_dim) * s.in_dim, 2);
    for (int threads : {1, 2, 3}) {
      const auto got = product(x, w, s.n, s.in_dim, s.out_dim, threads);
      for (int i = 0; i < s.n; ++i)
        for (int j = 0; j < s.out_dim; ++j) {
          double want = 0.0, mag = 0.0;  // the exact sum, and the size of its terms
          for (int d = 0; d < s.in_dim; ++d) {
            const double t = double{x[static_cast<std::size_t>(i) * s.in_dim + d]} *
                             w[static_cast<std::size_t>(j) * s.in_dim + d];
            want += t;
            mag += std::fabs(t);
          }
          // Each lane rounds about in_dim / P sums in fp32; with these random signs the error of
          // the total stays near 2^-24 sqrt(in_dim) of the terms' magnitude, far under this bound
          // (about 17 x 2^-24 of it), which a dropped or doubled term still exceeds.
          ASSERT_NEAR(got[static_cast<std::size_t>(i) * s.out_dim + j], want, 1e-6 * mag + 1e-30)
              << "row " << i << ", column " << j << " of " << s.n << " x " << s.in_dim << " x "
              << s.out_dim << " on " << threads << " threads";
        }
    }
  }
}

// What makes a decode row's logits the same alone or batched (chapters 3-5): each row of a batch
// of up to kDotRows rows gets exactly the outputs it gets alone, on any number of threads.
TEST(MatmulCpu, RowsOfSmallBatchesAreBitwiseTheSameAlone) {
  const int in_dim = 301, out_dim = 1003;  // tails in both dimensions
  static_assert(long{in_dim} * out_dim >= cpu::kParallelMacs, "even one row runs on threads");
  const auto w = random_floats(static_cast<std::size_t>(out_dim) * in_dim, 3);
  const auto x = random_floats(static_cast<std::size_t>(kDotRows) * in_dim, 4);
  std::vector<std::vector<float>> alone;
  for (int i = 0; i < kDotRows; ++i) {
    const std::vector<float> row(x.begin() + static_cast<long>(i) * in_dim,
                                 x.begin() + static_cast<long>(i + 1) * in_dim);
    alone.push_back(product(row, w, 1, in_dim, out_dim, 1));
  }
  for (int n : {2, 3, 5, 8, kDotRows})
    for (int threads : {1, 2, 3}) {
      const std::vector<float> xs(x.begin(), x.begin() + static_cast<long>(n) * in_dim);
      const auto got = product(xs, w, n, in_dim, out_dim, threads);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < out_dim; ++j)
          ASSERT_EQ(got[static_cast<std::size_t>(i) * out_dim + j], alone[i][j])
              << "row " << i << " of " << n << ", column " << j << ", " << threads << " threads";
    }
}

}  // namespace
}  // namespace kvheap
