// The CPU matrix product (kernels/matmul.hpp): against a double-precision product over awkward
// shapes, for fp32 weights and for bf16 and fp16 ones (against the same weights rounded on the
// host, and for bf16 pairs the activations too); and bitwise the same for a row whatever else is
// in its batch and however many threads run it.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.hpp"
#include "tests/support/checkpoint_writers.hpp"

namespace kvheap {
namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

/// out = x W^T with `threads` OpenMP threads.
std::vector<float> product(const std::vector<float>& x, const cpu::PackedMatrix& w, int n,
                           int threads) {
  std::vector<float> out(static_cast<std::size_t>(n) * w.out_dim(), -1.0f);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  cpu::matmul(out.data(), x.data(), w, n);
  omp_set_num_threads(saved);
  return out;
}

/// One way of packing weights: the element type, and for bf16 how it is multiplied.
struct Packing {
  DType dtype;
  cpu::Bf16Products bf16 = cpu::Bf16Products::kWiden;
  [[nodiscard]] bool pairs() const {
    return dtype == DType::BF16 && bf16 == cpu::Bf16Products::kPairs;
  }
  [[nodiscard]] std::string name() const {
    return std::string(dtype_name(dtype)) + (pairs() ? " pairs" : "");
  }
};

/// Every packing this build runs: bf16 pairs only where it has AVX512-BF16.
std::vector<Packing> packings() {
  std::vector<Packing> all = {{DType::F32}, {DType::BF16}, {DType::F16}};
  if (cpu::bf16_pairs_built()) all.push_back({DType::BF16, cpu::Bf16Products::kPairs});
  return all;
}

/// The elements as the packed matrix holds them: fp32 as is, bf16 and fp16 rounded to nearest
/// even.
std::vector<float> rounded(std::vector<float> w, DType t) {
  for (float& v : w) v = test::stored_as(v, t);
  return w;
}

// Sizes that leave tails (out_dim not a multiple of any panel width, batches not a multiple of
// the rows a block takes) and some that do not, and products large enough to run on several
// threads, one row among them; for each weight dtype.
TEST(MatmulCpu, MatchesDoublePrecisionOnAwkwardShapes) {
  struct Shape {
    int n, in_dim, out_dim;
  };
  for (const Packing pk : packings())
    for (const Shape s :
         {Shape{1, 1, 1}, Shape{1, 7, 3}, Shape{3, 33, 17}, Shape{5, 288, 9}, Shape{8, 100, 64},
          Shape{16, 31, 13}, Shape{17, 31, 96}, Shape{40, 257, 35}, Shape{7, 1000, 301},
          Shape{1, 1000, 301}, Shape{2, 0, 5}}) {
      const DType t = pk.dtype;
      const auto x = random_floats(static_cast<std::size_t>(s.n) * s.in_dim, 1);
      const auto w = random_floats(static_cast<std::size_t>(s.out_dim) * s.in_dim, 2);
      const cpu::PackedMatrix packed(w.data(), s.out_dim, s.in_dim, t, pk.bf16);
      const int padded = pk.pairs() ? (s.in_dim + 1) / 2 * 2 : s.in_dim;  // pairs pad k to even
      ASSERT_EQ(packed.bytes(), static_cast<std::size_t>(packed.panels()) * packed.panel_width() *
                                    padded * dtype_size(t));
      const auto wr = rounded(w, t);
      const auto xr = rounded(x, pk.pairs() ? DType::BF16 : DType::F32);
      for (int threads : {1, 2, 3}) {
        const auto got = product(x, packed, s.n, threads);
        for (int i = 0; i < s.n; ++i)
          for (int j = 0; j < s.out_dim; ++j) {
            double want = 0.0, mag = 0.0;  // the exact sum, and the size of its terms
            for (int d = 0; d < s.in_dim; ++d) {
              const double term = double{xr[static_cast<std::size_t>(i) * s.in_dim + d]} *
                                  wr[static_cast<std::size_t>(j) * s.in_dim + d];
              want += term;
              mag += std::fabs(term);
            }
            // One chain of in_dim fp32 roundings: with these random signs the error stays near
            // 2^-24 sqrt(in_dim) of the terms' magnitude, far under this bound (about 17 x 2^-24
            // of it), which a dropped or doubled term, or a weight widened wrongly, exceeds.
            ASSERT_NEAR(got[static_cast<std::size_t>(i) * s.out_dim + j], want, 1e-6 * mag + 1e-30)
                << pk.name() << " row " << i << ", column " << j << " of " << s.n << " x "
                << s.in_dim << " x " << s.out_dim << " on " << threads << " threads";
          }
      }
    }
}

// What makes a decode row's logits the same alone, batched or in a prompt (chapters 3-5): each
// row of a batch of any size gets exactly the outputs it gets alone, on any number of threads.
TEST(MatmulCpu, RowsOfAnyBatchAreBitwiseTheSameAlone) {
  const int in_dim = 301, out_dim = 1003, rows = 40;  // tails everywhere
  static_assert(long{in_dim} * out_dim >= cpu::kParallelMacs, "even one row runs on threads");
  const auto w = random_floats(static_cast<std::size_t>(out_dim) * in_dim, 3);
  const auto x = random_floats(static_cast<std::size_t>(rows) * in_dim, 4);
  for (const Packing pk : packings()) {
    const cpu::PackedMatrix packed(w.data(), out_dim, in_dim, pk.dtype, pk.bf16);
    std::vector<std::vector<float>> alone;
    for (int i = 0; i < rows; ++i) {
      const std::vector<float> row(x.begin() + static_cast<long>(i) * in_dim,
                                   x.begin() + static_cast<long>(i + 1) * in_dim);
      alone.push_back(product(row, packed, 1, 1));
    }
    for (int n : {2, 3, 5, 8, 13, 16, rows})
      for (int threads : {1, 2, 3}) {
        const std::vector<float> xs(x.begin(), x.begin() + static_cast<long>(n) * in_dim);
        const auto got = product(xs, packed, n, threads);
        for (int i = 0; i < n; ++i)
          for (int j = 0; j < out_dim; ++j)
            ASSERT_EQ(got[static_cast<std::size_t>(i) * out_dim + j], alone[i][j])
                << pk.name() << " row " << i << " of " << n << ", column " << j << ", " << threads
                << " threads";
      }
  }
}

// Narrow weights take half the bytes, padding included.
TEST(MatmulCpu, NarrowWeightsHoldHalfTheBytes) {
  const auto w = random_floats(static_cast<std::size_t>(768) * 512, 5);
  const cpu::PackedMatrix f32(w.data(), 768, 512, DType::F32);
  for (const Packing pk : packings()) {
    if (pk.dtype == DType::F32) continue;
    const DType t = pk.dtype;
    const cpu::PackedMatrix narrow(w.data(), 768, 512, t, pk.bf16);
    EXPECT_LE(narrow.bytes(),
              f32.bytes() / 2 + static_cast<std::size_t>(narrow.panel_width()) * 512 * 2)
        << pk.name();
    EXPECT_GE(narrow.bytes(), std::size_t{768} * 512 * 2) << pk.name();
  }
  EXPECT_GE(f32.bytes(), std::size_t{768} * 512 * 4);
}

}  // namespace
}  // namespace kvheap
