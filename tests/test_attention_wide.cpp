// The 16-float loops of the CPU attention twin (kernels/attention_simd.hpp) against its 8-float
// loops: bitwise the same scores and weighted sums of V for every element type, head count and
// head_dim, tails included. A build for a target with AVX-512 runs the 16-float loops; this is
// what makes its scores and weighted sums those of the 8-float loops in the same build. Both kinds
// compile for any target, so the test runs everywhere (without AVX-512, through the generic
// forms of the 16-float loads).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention_simd.hpp"
#include "kernels/kv_types.hpp"

namespace kvheap {
namespace {

namespace simd = cpu::simd;
constexpr int kRows = simd::kLanes;  // one tile

/// One tile of kRows cached rows of one KV head, four query heads and four rows of weights.
/// Values of mixed sign over a few binades, so that a sum added in another order rounds
/// differently often enough to show.
template <class T>
struct Tile {
  int head_dim;
  std::vector<T> k, v;         // [kRows, head_dim]
  std::vector<float> q, w, o;  // [4, head_dim] in T's block order, [4, kRows], [4, head_dim]
  std::vector<const T*> k_rows, v_rows;

  Tile(int hd, unsigned seed)
      : head_dim(hd), k(kRows * hd), v(kRows * hd), q(4 * hd), w(4 * kRows), o(4 * hd) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> mag(-30.0f, 30.0f);
    const auto draw = [&] { return std::ldexp(mag(rng), static_cast<int>(mag(rng)) / 6); };
    for (T& x : k) cpu::from_float(draw(), x);
    for (T& x : v) cpu::from_float(draw(), x);
    for (float& x : q) x = draw();
    for (float& x : w) x = std::abs(draw());
    for (float& x : o) x = draw();
    for (int h = 0; h < 4; ++h) simd::to_block_order<T>(&q[h * hd], hd);
    for (int p = 0; p < kRows; ++p) {
      k_rows.push_back(&k[p * hd]);
      v_rows.push_back(&v[p * hd]);
    }
  }
};

template <int kHeads, class T>
void expect_wide_equals_narrow(int head_dim) {
  SCOPED_TRACE(::testing::Message() << kHeads << " heads, head_dim " << head_dim << ", "
                                    << sizeof(T) << "-byte elements");
  const Tile<T> t(head_dim, 100u * head_dim + kHeads);
  simd::Vec8 wide[kHeads], narrow[kHeads];
  simd::scores_tile<kHeads, T, true>(t.q.data(), t.k_rows.data(), head_dim, wide);
  simd::scores_tile<kHeads, T, false>(t.q.data(), t.k_rows.data(), head_dim, narrow);
  for (int h = 0; h < kHeads; ++h)
    EXPECT_EQ(0, std::memcmp(&wide[h], &narrow[h], sizeof wide[h])) << "scores of head " << h;

  for (int nt : {kRows, 5}) {  // a full tile (unrolled) and a short one
    std::vector<float> a = t.o, b = t.o;
    if (nt == kRows) {
      simd::accumulate_block<kHeads, kRows, T, true>(t.w.data(), kRows, t.v_rows.data(), nt,
                                                     head_dim, a.data());
      simd::accumulate_block<kHeads, kRows, T, false>(t.w.data(), kRows, t.v_rows.data(), nt,
                                                      head_dim, b.data());
    } else {
      simd::accumulate_block<kHeads, 0, T, true>(t.w.data(), kRows, t.v_rows.data(), nt, head_dim,
                                                 a.data());
      simd::accumulate_block<kHeads, 0, T, false>(t.w.data(), kRows, t.v_rows.data(), nt, head_dim,
                                                  b.data());
    }
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
        << "weighted sum of V over " << nt << " rows";
    EXPECT_NE(0, std::memcmp(a.data(), t.o.data(), a.size() * sizeof(float)));
  }
}

template <class T>
void expect_wide_equals_narrow_for_all_heads() {
  // Multiples of 16 (whole wide steps), of 8 only (8 left after the wide steps), and others: a
  // tail alone or after 8 (6, 12), after wide steps (20, 44, 140), or after both (28).
  for (int head_dim : {6, 8, 12, 16, 20, 24, 28, 40, 44, 64, 72, 128, 136, 140, 256}) {
    expect_wide_equals_narrow<1, T>(head_dim);
    expect_wide_equals_narrow<2, T>(head_dim);
    expect_wide_equals_narrow<4, T>(head_dim);
  }
}

TEST(AttentionWide, Fp32LoopsGiveBitwiseTheResultsOfTheNarrowOnes) {
  expect_wide_equals_narrow_for_all_heads<float>();
}

TEST(AttentionWide, Bf16LoopsGiveBitwiseTheResultsOfTheNarrowOnes) {
  expect_wide_equals_narrow_for_all_heads<cpu::BF16Bits>();
}

TEST(AttentionWide, Fp16LoopsGiveBitwiseTheResultsOfTheNarrowOnes) {
  expect_wide_equals_narrow_for_all_heads<cpu::F16Bits>();
}

TEST(AttentionWide, SumsOfEightRowsTwoHeadsAtATimeAddInTheOrderOfSum8) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-30.0f, 30.0f);
  for (int round = 0; round < 32; ++round) {
    simd::Vec16 acc[8];  // two heads' rows in pairs
    for (auto& a : acc)
      for (int l = 0; l < 2 * simd::kLanes; ++l)
        a[l] = std::ldexp(mag(rng), static_cast<int>(mag(rng)) / 6);
    const simd::Vec16 both =
        simd::pair_sums(simd::head_partials(acc), simd::head_partials(acc + 4));
    for (int h = 0; h < 2; ++h)
      for (int p = 0; p < kRows; ++p) {
        const simd::Vec16& pair = acc[h * 4 + p / 2];
        const simd::Vec8 row = p % 2 == 0 ? simd::low_half(pair) : simd::high_half(pair);
        const float want = simd::sum8(row);
        ASSERT_EQ(0, std::memcmp(&want, &both[h * kRows + p], sizeof want))
            << "head " << h << ", row " << p;
      }
  }
}

}  // namespace
}  // namespace kvheap
