// The 16-float loops of the CPU attention twin (kernels/decode_attention_simd.hpp) against its
// 8-float loops: the same scores and weighted sums of V for every element type, head count and
// head_dim, tails included, to within rounding. Both kinds compile for any target, so the test runs
// everywhere (without AVX-512, through the generic forms of the 16-float loads).
//
// Both are written to add the same products in the same order, and built for a Xeon they agreed
// bit for bit. Built for an AMD Zen 4 (GCC 12, -march=native) they differed in the last bit: the
// optimiser fused the multiply-adds of one loop into FMAs and not those of the other, and built
// with -ffp-contract=off some scores still differed, for a cause not pinned down. So they are
// compared within a few roundings of the terms' magnitude: a product left out, counted twice or
// taken from the wrong lane is far outside that bound; a change of order within it is not caught.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/decode_attention_simd.hpp"
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

/// Largest |x| over the stored elements.
template <class T>
float max_abs(const std::vector<T>& xs) {
  float m = 0.0f;
  for (const T& x : xs) m = std::max(m, std::abs(cpu::to_float(x)));
  return m;
}

/// a and b agree within `bound` in every element, printed as `what` when they do not.
void expect_close(const float* a, const float* b, int n, float bound, const std::string& what) {
  for (int i = 0; i < n; ++i) ASSERT_NEAR(a[i], b[i], bound) << what << ", element " << i;
}

template <int kHeads, class T>
void expect_wide_equals_narrow(int head_dim) {
  SCOPED_TRACE(::testing::Message() << kHeads << " heads, head_dim " << head_dim << ", "
                                    << sizeof(T) << "-byte elements");
  const Tile<T> t(head_dim, 100u * head_dim + kHeads);
  simd::Vec8 wide[kHeads], narrow[kHeads];
  simd::scores_tile<kHeads, T, true>(t.q.data(), t.k_rows.data(), head_dim, wide);
  simd::scores_tile<kHeads, T, false>(t.q.data(), t.k_rows.data(), head_dim, narrow);
  // Two orders of n roundings each differ by at most about 2 n eps times the sum of the terms'
  // magnitudes, which head_dim * max|q| * max|k| bounds.
  constexpr float kEps = std::numeric_limits<float>::epsilon();
  const float score_bound = 2.0f * (head_dim + 1) * kEps * head_dim * max_abs(t.q) * max_abs(t.k);
  for (int h = 0; h < kHeads; ++h)
    expect_close(reinterpret_cast<const float*>(&wide[h]),
                 reinterpret_cast<const float*>(&narrow[h]), kRows, score_bound,
                 "scores of head " + std::to_string(h));

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
    const float sum_bound =
        2.0f * (nt + 1) * kEps * (max_abs(t.o) + nt * max_abs(t.w) * max_abs(t.v));
    expect_close(a.data(), b.data(), static_cast<int>(a.size()), sum_bound,
                 "weighted sum of V over " + std::to_string(nt) + " rows");
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

TEST(AttentionWide, Fp32LoopsGiveTheResultsOfTheNarrowOnes) {
  expect_wide_equals_narrow_for_all_heads<float>();
}

TEST(AttentionWide, Bf16LoopsGiveTheResultsOfTheNarrowOnes) {
  expect_wide_equals_narrow_for_all_heads<cpu::BF16Bits>();
}

TEST(AttentionWide, Fp16LoopsGiveTheResultsOfTheNarrowOnes) {
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
