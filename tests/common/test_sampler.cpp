// Tests for Sampler and argmax: greedy choice, determinism per seed, empirical frequencies against
// the softmax, the nucleus cut against a plain full-sort reference, and config validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.hpp"
#include "common/serving/sampler.hpp"
#include "kernels/exp_simd.hpp"
#include "kernels/sample.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

// ---- helpers ------------------------------------------------------------------------------------

std::vector<float> random_logits(std::size_t n, std::uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  // Only the test's inputs come from <random> distributions; the sampler never does.
  std::normal_distribution<float> normal(0.0f, scale);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = std::exp((logits[i] - mx) / temperature);
  const double sum = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& x : p) x /= sum;
  return p;
}

std::vector<double> frequencies(Sampler& s, const std::vector<float>& logits, int draws) {
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) f[static_cast<std::size_t>(s.sample(logits))] += 1.0 / draws;
  return f;
}

// Five standard errors of a frequency over `draws`, plus a little slack for rounding.
double tolerance(double p, int draws) { return 5.0 * std::sqrt(p * (1.0 - p) / draws) + 1e-3; }

using test::expect_error_mentioning;

// A plain loop's second (the largest logit but the one at `token`) and max |logit|, NaN left out.
std::pair<float, float> plain_second_and_max_abs(const std::vector<float>& row, int token) {
  float second = -std::numeric_limits<float>::infinity(), max_abs = 0;
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (row[i] != row[i]) continue;
    if (static_cast<int>(i) != token) second = std::max(second, row[i]);
    max_abs = std::max(max_abs, std::fabs(row[i]));
  }
  return {second, max_abs};
}

// ---- argmax and greedy --------------------------------------------------------------------------

TEST(Sampler, ArgmaxTakesTheFirstOfEqualMaxima) {
  EXPECT_EQ(argmax(std::vector<float>{0.5f}), 0);
  EXPECT_EQ(argmax(std::vector<float>{1.0f, 3.0f, 2.0f, 3.0f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{-2.0f, -1.0f, -1.0f}), 1);
  const float ninf = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(argmax(std::vector<float>{ninf, ninf, -1e30f}), 2);
  expect_error_mentioning<InputError>([] { (void)argmax(std::vector<float>{}); }, {"empty"});
  expect_error_mentioning<InputError>(
      [] {
        (void)argmax(std::vector<float>{1.0f, std::nanf(""), 2.0f});
      },
      {"logit 1", "NaN"});
}

// The jobs every row of the scan's tests runs: greedy, and draws at top-p 1 and 0.9, whose scan
// shares its pass with the exponential where the build has AVX-512.
const std::vector<SamplingJob> kScanJobs = {
    SamplingJob{0, 0.0f, 1.0f, 0.0f}, draw_job(0, 1.0f, 1.0f, 0.5f), draw_job(0, 0.8f, 0.9f, 0.5f)};

// The host's scan keeps no index per lane: it finds the first block of 2048 that reaches the
// largest logit, and best's index in it. Equal maxima are planted in one lane of two blocks, in two
// lanes of one block, side by side and in the row's tail; the token must be the lowest index, and
// best, second and max_abs those of a plain loop over the row, for a greedy row and a draw alike
// (a draw's token: kInfLogit at +inf, kNoTokenAllowed where every logit is -inf).
TEST(Sampler, HostScanFindsTheFirstMaximumAcrossBlocksAndLanes) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const int vocab : {1, 15, 16, 17, 2047, 2048, 2049, 6000, 32000}) {
    std::vector<std::vector<int>> plants = {{vocab - 1}, {0, vocab - 1}};
    if (vocab > 4100) plants.push_back({4096 + 5, 2048 + 5, 5});    // one lane, three blocks
    if (vocab > 2100) plants.push_back({2048 + 3, 2048 + 16 + 7});  // two lanes, one block
    if (vocab > 40) plants.push_back({33, 32});                     // side by side
    for (const auto& at : plants)
      for (const float top : {100.0f, inf, -inf}) {
        std::vector<float> row = random_logits(static_cast<std::size_t>(vocab), at.size(), 2.0f);
        if (top == -inf) std::fill(row.begin(), row.end(), -inf);
        // A logit far below the others, so that max |x| is the smallest's (a draw takes it so).
        const int low = (at[0] + vocab / 2) % vocab;
        if (top == 100.0f && std::find(at.begin(), at.end(), low) == at.end())
          row[static_cast<std::size_t>(low)] = -250.0f;
        for (const int i : at) row[static_cast<std::size_t>(i)] = top;
        const int want = *std::min_element(at.begin(), at.end());
        for (const SamplingJob& job : kScanJobs) {
          SCOPED_TRACE(testing::Message()
                       << "vocab " << vocab << " top " << top << " at " << at[0] << " top-p "
                       << job.top_p << " draw " << (job.inv_temperature > 0));
          SampledToken t;
          cpu::sample_rows(&t, row.data(), 1, vocab, &job, 1);
          const bool draw = job.inv_temperature > 0;
          if (!draw) {
            EXPECT_EQ(t.token, top == -inf ? 0 : want);
          } else if (top != 100.0f) {
            EXPECT_EQ(t.token,
                      top == inf ? SampledToken::kInfLogit : SampledToken::kNoTokenAllowed);
          }
          const auto [second, max_abs] = plain_second_and_max_abs(row, top == -inf ? 0 : want);
          EXPECT_EQ(t.best, top);
          EXPECT_EQ(t.second, second);
          EXPECT_EQ(t.max_abs, max_abs);
        }
      }
  }
}

// A NaN makes the token kNaNLogit and takes no part in best, second or max_abs, as on the device:
// planted at the start, in the middle and in the tail, beside the row's largest value and a tie;
// either sign of NaN (x86's own arithmetic makes negative ones); and with the row's first block
// -inf, the largest and second in the next: at 0 the NaN is in that block, where a draw computes no
// p.
TEST(Sampler, HostScanLeavesNaNOutOfBestAndSecond) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const int vocab : {3, 17, 6000})
    for (const int at : {0, vocab / 2, vocab - 1})
      for (const float planted : {nan, -nan})
        for (const bool masked_start : {false, true}) {
          if (masked_start && vocab < 4096) continue;
          std::vector<float> row = random_logits(static_cast<std::size_t>(vocab), 11, 2.0f);
          if (masked_start)  // the first block -inf, but for the NaN if it is there
            std::fill(row.begin(), row.begin() + 2048, -std::numeric_limits<float>::infinity());
          const int top = masked_start ? 4000 : (at + 1) % vocab;
          row[static_cast<std::size_t>(top)] = 100.0f;
          const int second_at = masked_start ? 3999 : (at + vocab - 1) % vocab;  // by the NaN
          row[static_cast<std::size_t>(second_at)] = 50.0f;
          row[static_cast<std::size_t>(at)] = planted;
          const auto [second, max_abs] = plain_second_and_max_abs(row, top);
          for (const SamplingJob& job : kScanJobs) {
            SCOPED_TRACE(testing::Message()
                         << "vocab " << vocab << " NaN at " << at << " sign "
                         << std::signbit(planted) << " masked start " << masked_start << " top-p "
                         << job.top_p << " draw " << (job.inv_temperature > 0));
            SampledToken t;
            cpu::sample_rows(&t, row.data(), 1, vocab, &job, 1);
            EXPECT_EQ(t.token, SampledToken::kNaNLogit);
            EXPECT_EQ(t.best, 100.0f);
            EXPECT_EQ(t.second, second);
            EXPECT_EQ(t.max_abs, max_abs);
          }
        }
}

// +0 and -0 compare equal, so best is the value at the first index of the largest: its sign too,
// for a greedy row and a draw alike (the device twin reports the same). The zeros are planted in
// one lane of two blocks, in a lane of one block and a lower lane of the next, and in two lanes
// of one block. A draw's second, the other zero, keeps the sign the greedy scan gives it, though
// the draw merges its blocks' lanes at each block's end.
TEST(Sampler, HostScanTakesTheSignOfTheFirstZero) {
  const int vocab = 6000;
  for (const auto& [a, b] : {std::pair{100, 4196}, std::pair{2051, 4098}, std::pair{2050, 2051}}) {
    for (const float first : {-0.0f, 0.0f}) {
      std::vector<float> row(static_cast<std::size_t>(vocab), -1.0f);
      row[static_cast<std::size_t>(a)] = first;
      row[static_cast<std::size_t>(b)] = -first;
      SampledToken greedy;
      for (const SamplingJob job :
           {SamplingJob{0, 0.0f, 1.0f, 0.0f}, draw_job(0, 1.0f, 1.0f, 0.5f)}) {
        SampledToken t;
        cpu::sample_rows(&t, row.data(), 1, vocab, &job, 1);
        EXPECT_EQ(std::signbit(t.best), std::signbit(first))
            << "zeros at " << a << " and " << b << ", draw " << (job.inv_temperature > 0);
        if (job.inv_temperature == 0.0f) {
          EXPECT_EQ(t.token, a);
          greedy = t;
        } else {  // second (a zero too) as the greedy scan keeps it, its sign included
          EXPECT_EQ(std::signbit(t.second), std::signbit(greedy.second))
              << "zeros at " << a << " and " << b;
        }
      }
    }
  }
}

TEST(Sampler, ZeroTemperatureIsGreedy) {
  Sampler greedy({.temperature = 0.0f, .top_p = 0.9f, .seed = 7});
  for (std::uint64_t trial = 0; trial < 50; ++trial) {
    const std::vector<float> logits = random_logits(1000, trial);
    EXPECT_EQ(greedy.sample(logits), argmax(logits));
  }
}

// ---- determinism --------------------------------------------------------------------------------

TEST(Sampler, SameSeedGivesTheSameSequence) {
  for (const float top_p : {0.9f, 1.0f}) {
    SCOPED_TRACE(top_p);
    Sampler a({.temperature = 1.0f, .top_p = top_p, .seed = 1234});
    Sampler b({.temperature = 1.0f, .top_p = top_p, .seed = 1234});
    for (std::uint64_t step = 0; step < 500; ++step) {
      const std::vector<float> logits = random_logits(300, step, 1.0f);
      ASSERT_EQ(a.sample(logits), b.sample(logits)) << "step " << step;
    }
  }
}

TEST(Sampler, DifferentSeedsGiveDifferentSequences) {
  const std::vector<float> flat(64, 0.0f);  // every token equally likely
  Sampler a({.temperature = 1.0f, .top_p = 1.0f, .seed = 1});
  Sampler b({.temperature = 1.0f, .top_p = 1.0f, .seed = 2});
  int differing = 0;
  for (int i = 0; i < 200; ++i) differing += a.sample(flat) != b.sample(flat) ? 1 : 0;
  // Two independent streams agree on about 1 draw in 64; 150 of 200 differing is conservative.
  EXPECT_GT(differing, 150);
}

// ---- distributions ------------------------------------------------------------------------------

TEST(Sampler, FullDistributionFrequenciesMatchTheSoftmax) {
  const std::vector<float> logits = {1.0f, 2.5f, 0.0f, -1.0f, 3.0f, 1.5f};
  const std::vector<double> p = softmax(logits, 1.0);
  Sampler s({.temperature = 1.0f, .top_p = 1.0f, .seed = 99});
  const int draws = 20000;
  const std::vector<double> f = frequencies(s, logits, draws);
  for (std::size_t i = 0; i < p.size(); ++i) {
    EXPECT_NEAR(f[i], p[i], tolerance(p[i], draws)) << "token " << i;
  }
  EXPECT_GT(f[3], 0.0) << "the least likely token (p = " << p[3] << ") never came up";
}

TEST(Sampler, TemperatureScalesTheLogits) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f};
  const int draws = 20000;
  std::vector<double> top_share;
  for (const float temperature : {0.5f, 1.0f, 2.0f}) {
    SCOPED_TRACE(temperature);
    Sampler s({.temperature = temperature, .top_p = 1.0f, .seed = 5});
    const std::vector<double> f = frequencies(s, logits, draws);
    const std::vector<double> p = softmax(logits, temperature);
    for (std::size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(f[i], p[i], tolerance(p[i], draws));
    top_share.push_back(f[0]);
  }
  // Lower temperature concentrates mass on the most likely token.
  EXPECT_GT(top_share[0], top_share[1]);
  EXPECT_GT(top_share[1], top_share[2]);
  // A tiny temperature is greedy in effect, and must not overflow into NaN.
  Sampler cold({.temperature = 1e-6f, .top_p = 1.0f, .seed = 5});
  for (int i = 0; i < 200; ++i) EXPECT_EQ(cold.sample(logits), 0);
}

// A subnormal temperature, whose inverse overflows a float: only the largest logits can be drawn,
// and never a NaN from 0 x inf.
TEST(Sampler, ASubnormalTemperatureDrawsOnlyTheLargestLogits) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, ninf};
  for (const float top_p : {0.5f, 1.0f}) {
    Sampler s({.temperature = 1e-45f, .top_p = top_p, .seed = 4});
    for (int i = 0; i < 200; ++i) {
      const int t = s.sample(logits);
      ASSERT_TRUE(t == 1 || t == 3) << t;
    }
  }
}

TEST(Sampler, TinyTopPAlwaysReturnsTheArgmax) {
  Sampler s({.temperature = 2.0f, .top_p = 1e-6f, .seed = 3});
  for (std::uint64_t trial = 0; trial < 200; ++trial) {
    const std::vector<float> logits = random_logits(500, trial, 0.5f);
    ASSERT_EQ(s.sample(logits), argmax(logits)) << "trial " << trial;
  }
  // Tied maxima: the lowest index, like argmax.
  EXPECT_EQ(s.sample(std::vector<float>{0.0f, 1.0f, 1.0f}), 1);
}

TEST(Sampler, NucleusKeepsTheSmallestSetAboveTopP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05. top_p 0.7 keeps {0, 1} (0.5 is not above 0.7, 0.8 is);
  // top_p 0.85 keeps {0, 1, 2}. Inside the nucleus the mass is renormalised.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  const int draws = 20000;
  Sampler two({.temperature = 1.0f, .top_p = 0.7f, .seed = 11});
  const std::vector<double> f2 = frequencies(two, logits, draws);
  EXPECT_NEAR(f2[0], 0.5 / 0.8, tolerance(0.625, draws));
  EXPECT_NEAR(f2[1], 0.3 / 0.8, tolerance(0.375, draws));
  EXPECT_EQ(f2[2] + f2[3], 0.0);
  Sampler three({.temperature = 1.0f, .top_p = 0.85f, .seed = 11});
  const std::vector<double> f3 = frequencies(three, logits, draws);
  EXPECT_NEAR(f3[2], 0.15 / 0.95, tolerance(0.15 / 0.95, draws));
  EXPECT_EQ(f3[3], 0.0);
}

// The plain algorithm, in double precision: sort the whole vocabulary by p (equal p by index),
// cut the shortest head whose mass exceeds top_p, then walk that nucleus in index order to
// u * its mass (kernels/sample.hpp's rule). The sampler never sorts; with the same random stream
// it must pick the same token, except where u * mass or the cut falls within rounding of a
// boundary. Returns the token, and whether the draw was that near a boundary.
std::pair<int, bool> reference_nucleus(const std::vector<float>& logits, float top_p, float u,
                                       float temperature = 1.0f) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  const double inv_t = inverse_temperature(temperature);
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - mx) * inv_t);
  std::vector<std::size_t> order(p.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return p[a] > p[b]; });
  const double eps = 1e-5 * sum;  // far above fp32 sums' rounding, far below any real gap
  double mass = 0.0;
  std::size_t last = order.size() - 1;
  bool near = false;
  for (std::size_t i = 0; i < order.size(); ++i) {
    mass += p[order[i]];
    if (mass > top_p * sum) {
      last = i;
      near = mass - p[order[i]] > top_p * sum - eps || mass < top_p * sum + eps;
      break;
    }
  }
  std::vector<char> in(p.size(), 0);
  for (std::size_t i = 0; i <= last; ++i) in[order[i]] = 1;
  const double goal = u * mass;
  double cdf = 0.0;
  int token = static_cast<int>(order[last]);
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (!in[i]) continue;
    cdf += p[i];
    if (goal < cdf) {
      token = static_cast<int>(i);
      near = near || cdf - goal < eps || goal - (cdf - p[i]) < eps;
      break;
    }
  }
  return {token, near};
}

TEST(Sampler, NucleusMatchesAFullSortReference) {
  // Small, mid-sized and Llama-sized vocabularies; fewer steps where each one costs more.
  const std::vector<std::pair<std::size_t, std::uint64_t>> shapes = {
      {7, 400}, {1000, 200}, {32000, 15}};
  int near_ties = 0;
  for (const auto& [vocab, steps] : shapes)
    for (const float temperature : {1.0f, 0.7f})  // 1 / 0.7: a product that rounds
      for (const float top_p : {0.5f, 0.9f, 0.99f, 1.0f}) {
        SCOPED_TRACE(testing::Message()
                     << "vocab " << vocab << ", T " << temperature << ", top_p " << top_p);
        Sampler s({.temperature = temperature, .top_p = top_p, .seed = 77});
        std::mt19937_64 twin(77);
        for (std::uint64_t step = 0; step < steps; ++step) {
          const std::vector<float> logits = random_logits(vocab, step, 2.0f);
          const float u = static_cast<float>(twin() >> 40) * 0x1p-24f;
          const auto [want, near] = reference_nucleus(logits, top_p, u, temperature);
          const int got = s.sample(logits);
          if (got != want && near) {
            ++near_ties;
            continue;
          }
          ASSERT_EQ(got, want) << "step " << step;
        }
      }
  if (near_ties > 0) std::cout << "[ near tie ] " << near_ties << " draws at a boundary\n";
  EXPECT_LE(near_ties, 2);
}

TEST(Sampler, MaskedTokensAreNeverSampled) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {ninf, 0.0f, ninf, 0.0f, ninf};
  for (const float top_p : {0.5f, 1.0f}) {
    Sampler s({.temperature = 1.0f, .top_p = top_p, .seed = 8});
    for (int i = 0; i < 2000; ++i) {
      const int t = s.sample(logits);
      ASSERT_TRUE(t == 1 || t == 3) << t;
    }
  }
  Sampler one({.temperature = 1.0f, .top_p = 0.9f, .seed = 8});
  EXPECT_EQ(one.sample(std::vector<float>{4.0f}), 0);
}

// The host's draw at temperature 1 from one row of logits, at top_p and the uniform number u.
SampledToken draw_at(const std::vector<float>& logits, float top_p, float u) {
  const SamplingJob job = draw_job(0, 1.0f, top_p, u);
  SampledToken t;
  cpu::sample_rows(&t, logits.data(), 1, static_cast<int>(logits.size()), &job, 1);
  return t;
}

// Ties at the cut, spread over many of the walk's spans: 1000 tokens of logit 0 (every fifth of
// 5000), the rest at -30 (their mass, 4000 e^-30, moves no cut). top_p 0.3005 keeps the first 301
// of the ties by index (300 of mass 1 do not exceed 300.5, 301 do), ending at token 1500; every
// draw must be the one the full sort gives, however far u walks into them. No u lies within
// rounding of a boundary (u x 301 is no whole number), so none of them is a near tie.
TEST(Sampler, TiedTokensAtTheCutAreTakenByIndexAcrossSpans) {
  std::vector<float> logits(5000, -30.0f);
  for (std::size_t i = 0; i < logits.size(); i += 5) logits[i] = 0.0f;
  for (const float u : {0.0017f, 0.1f, 0.5f, 0.9f, 0.9984f, 0.9999f}) {
    SCOPED_TRACE(testing::Message() << "u " << u);
    const SampledToken t = draw_at(logits, 0.3005f, u);
    const auto [want, near] = reference_nucleus(logits, 0.3005f, u);
    ASSERT_FALSE(near);
    EXPECT_EQ(want, 5 * static_cast<int>(u * 301));
    EXPECT_EQ(t.token, want);
  }
}

// A first chunk whose p are all below the smallest normal float (0 by the rule) while a later one
// holds the largest logit: a top-p 1 draw at u 0 must take the first token of p > 0. The
// one pass sums p unmasked, so that chunk's sum, scaled to best's frame, is a tiny number unless
// it is set to 0. Chunks of 2048: the largest logit alone in a second chunk, and in a row where
// the first chunk sits 10 below a sine's at T 0.1.
TEST(Sampler, AChunkOfNoMassIsNeverDrawnFrom) {
  std::vector<float> lone(2049, -100.0f);
  lone[2048] = 1.0f;
  std::vector<float> sine(32000);
  for (std::size_t i = 0; i < sine.size(); ++i)
    sine[i] = 5.0f * std::sin(0.37f * static_cast<float>(i)) - (i < 2048 ? 10.0f : 0.0f);
  for (const auto& [row, temperature] : {std::pair{&lone, 1.0f}, std::pair{&sine, 0.1f}}) {
    const SamplingJob job = draw_job(0, temperature, 1.0f, 0.0f);
    SampledToken t;
    cpu::sample_rows(&t, row->data(), 1, static_cast<int>(row->size()), &job, 1);
    // The rule's first token of p > 0: p at least the smallest normal float (in double here).
    const double best = *std::max_element(row->begin(), row->end());
    int want = 0;
    while (std::exp((row->at(static_cast<std::size_t>(want)) - best) / temperature) <
           std::numeric_limits<float>::min())
      ++want;
    EXPECT_EQ(want, 2048) << "vocab " << row->size();
    EXPECT_EQ(t.token, want) << "vocab " << row->size();
  }
}

// Two tied largest logits, the rest 40 below (e^-40 / T of mass each): top_p 0.5 of S is then
// one of the ties and a little more, so the nucleus holds both, and u 0.75 draws the second. Only
// if p of best is exactly 1 in S, as the rule has it and the device computes it: a sum that held
// it as 1 - 1e-7 would cut the nucleus after the first. The ties in one chunk and in two; largest
// logits whose product with (1 / T) log2(e) is rounded, above and below 0.
TEST(Sampler, TiedLargestLogitsOnTheCutAreBothKept) {
  for (const int second_at : {40, 5000})
    for (const float top : {7.3f, -3.1f, 0.37f, 12.9f, 101.7f, -55.5f})
      for (const float temperature : {0.55f, 0.8f, 1.0f}) {
        std::vector<float> row(8192, top - 40.0f);
        row[17] = row[static_cast<std::size_t>(second_at)] = top;
        const SamplingJob job = draw_job(0, temperature, 0.5f, 0.75f);
        SampledToken t;
        cpu::sample_rows(&t, row.data(), 1, static_cast<int>(row.size()), &job, 1);
        EXPECT_EQ(t.token, second_at)
            << "ties at 17 and " << second_at << ", logit " << top << ", T " << temperature;
      }
}

// Five tokens hold all but e^-40 of the mass, with p 1, 0.5, 0.3, 0.25 and 0.2: top_p 0.9 of S
// (2.025) needs the first four (the first three hold 1.8), and the fifth is out. The first two
// share a chunk of 2048 (in two of its 16 lanes), the others have one each. The draw's floor for
// its candidates comes from the lanes' largest p here, and must not rise past the fourth: every
// draw must be the full sort's.
TEST(Sampler, TheFloorFromTheLanesLargestLogitsKeepsTheWholeNucleus) {
  std::vector<float> logits(12288, -40.0f);
  const std::array<int, 5> at = {100, 101, 4096 + 300, 6144 + 2000, 8192 + 50};
  const std::array<float, 5> p = {1.0f, 0.5f, 0.3f, 0.25f, 0.2f};
  for (std::size_t k = 0; k < at.size(); ++k)
    logits[static_cast<std::size_t>(at[k])] = std::log(p[k]);
  for (const float u : {0.05f, 0.3f, 0.6f, 0.8f, 0.95f, 0.99f}) {
    SCOPED_TRACE(testing::Message() << "u " << u);
    const SampledToken t = draw_at(logits, 0.9f, u);
    const auto [want, near] = reference_nucleus(logits, 0.9f, u);
    ASSERT_FALSE(near);
    EXPECT_EQ(t.token, want);
  }
}

// A top-p < 1 draw walks only its candidates, kept chunk by chunk (2048 tokens: during the
// exponential's pass, or after it where the build has AVX-512). 600 ties of logit 0 in a
// vocabulary of 20011 (no whole number of vectors): 300 in the first two chunks (every 13th token
// from 0), 300 in the eighth to tenth (every 11th from 16000); the rest at -30. top_p 0.7005 keeps
// the first 421 ties by index (420 of mass 1 do not exceed 420.3, 421 do): all of the first 300,
// then 121 of the late ones, over two spans of the candidates' walk. Each draw must be the one the
// full sort gives.
TEST(Sampler, CandidatesFromEveryChunkTakeTheTiesByIndex) {
  std::vector<float> logits(20011, -30.0f);
  for (int k = 0; k < 300; ++k) {
    logits[static_cast<std::size_t>(13 * k)] = 0.0f;
    logits[static_cast<std::size_t>(16000 + 11 * k)] = 0.0f;
  }
  for (const float u : {0.0013f, 0.25f, 0.5f, 0.75f, 0.9f, 0.9991f}) {
    SCOPED_TRACE(testing::Message() << "u " << u);
    const SampledToken t = draw_at(logits, 0.7005f, u);
    const auto [want, near] = reference_nucleus(logits, 0.7005f, u);
    ASSERT_FALSE(near);
    const int k = static_cast<int>(u * 421);
    EXPECT_EQ(want, k < 300 ? 13 * k : 16000 + 11 * (k - 300));
    EXPECT_EQ(t.token, want);
  }
}

// Where the build has AVX-512, a draw sums p in one pass with the scan, each block of 2048 tokens
// against the largest logit found so far, and scales the blocks' sums to the row's best at the end;
// it picks the candidates by their logits once S is known. So the largest logit comes late here:
// 200 ties of logit 0 in the first block (every 7th token), the best, 2, in the third, 200 more
// ties from token 8000; -inf over part of the fourth block and in the row's tail, the rest -30, in
// a vocabulary of 10007 (no whole number of vectors). At T 1 a tie's p is e^-2; top_p is set so
// that the nucleus is the best and the first 301 ties by index, 101 of them late ones. Every draw,
// top-p 1 too, must be the full sort's, and none of the u is near a boundary of the walk.
TEST(Sampler, DrawsMatchTheFullSortWhenTheLargestLogitComesLate) {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> logits(10007, -30.0f);
  for (int k = 0; k < 200; ++k) {
    logits[static_cast<std::size_t>(7 * k)] = 0.0f;
    logits[static_cast<std::size_t>(8000 + 7 * k)] = 0.0f;
  }
  logits[5000] = 2.0f;
  std::fill(logits.begin() + 6200, logits.begin() + 6300, ninf);
  std::fill(logits.begin() + 10000, logits.end(), ninf);
  double sum = 0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x) - 2.0);
  const double tie = std::exp(-2.0);
  const auto top_p = static_cast<float>((1.0 + 300.5 * tie) / sum);
  for (const float p : {top_p, 1.0f})
    for (const float u : {0.0013f, 0.1f, 0.37f, 0.5f, 0.77f, 0.9f, 0.9991f}) {
      SCOPED_TRACE(testing::Message() << "top_p " << p << " u " << u);
      const SampledToken t = draw_at(logits, p, u);
      const auto [want, near] = reference_nucleus(logits, p, u);
      // At top-p 1 the reference's sorted sum can pass S by rounding among the e^-32 tokens, and
      // call its cut near; the cut takes every token that matters either way.
      if (p < 1.0f) {
        ASSERT_FALSE(near);
      }
      EXPECT_EQ(t.token, want);
      EXPECT_EQ(t.best, 2.0f);
      EXPECT_EQ(t.second, 0.0f);
      EXPECT_EQ(t.max_abs, std::numeric_limits<float>::infinity());  // |-inf|
    }
}

// Logits far apart, or a temperature near 0, put (x - best) / T far below any float's exponent:
// the draw's sums must still come out finite. A logit 1e30 above 4095 zeros; 1.5e38 and -1.5e38
// among ones (x - best overflows); and a row of steps of 0.5 at T 1e-30, whose 715 largest logits
// tie and share all the mass. Every draw must be the full sort's.
TEST(Sampler, DrawsStayFiniteForFarLogitsAndTemperaturesNearZero) {
  std::vector<float> far(4096, 0.0f);
  far[0] = 1e30f;
  std::vector<float> overflow(4096, 1.0f);
  overflow[3] = 1.5e38f;
  overflow[2050] = -1.5e38f;
  std::vector<float> steps(5000);
  for (std::size_t i = 0; i < steps.size(); ++i) steps[i] = 0.5f * static_cast<float>(i % 7);
  for (const auto& [name, logits, temperature] :
       {std::tuple{"far", far, 1.0f}, std::tuple{"overflow", overflow, 1.0f},
        std::tuple{"steps", steps, 1e-30f}})
    for (const float top_p : {0.9f, 1.0f})
      for (const float u : {0.1f, 0.5f, 0.9f}) {
        SCOPED_TRACE(testing::Message() << name << " top_p " << top_p << " u " << u);
        const SamplingJob job = draw_job(0, temperature, top_p, u);
        SampledToken t;
        cpu::sample_rows(&t, logits.data(), 1, static_cast<int>(logits.size()), &job, 1);
        const auto [want, near] = reference_nucleus(logits, top_p, u, temperature);
        if (top_p < 1.0f) {  // at top-p 1, as above, the reference's cut can call itself near
          ASSERT_FALSE(near);
        }
        EXPECT_EQ(t.token, want);
      }
}

// Rounding can leave the whole row's mass short of top_p * S, S summed in float: then every token
// is in (tau 0), as on the device. Seven logits, six of p e^-16.3 = 8.3e-8, each of which rounds
// S up by a whole unit of 1's last place (1.2e-7); top_p = 1 - 2^-24 then asks for more than the
// six and the best carry. A draw at u near 1 is the last token; at 0.5, the best.
TEST(Sampler, RoundingPastTheWholeMassTakesEveryToken) {
  const std::vector<float> logits = {0.0f, -16.3f, -16.3f, -16.3f, -16.3f, -16.3f, -16.3f};
  const float top_p = 1.0f - 0x1p-24f;
  for (const auto& [u, want] :
       std::vector<std::pair<float, int>>{{1.0f - 0x1p-24f, 6}, {0.5f, 0}}) {
    SCOPED_TRACE(testing::Message() << "u " << u);
    const SampledToken t = draw_at(logits, top_p, u);
    EXPECT_EQ(t.token, want);
  }
}

// The host's p (rule step 3): exp((x - best) / T) within 2 ulp where that is a normal float, of the
// exact product where the build computes it so (cpu::simd::kExactProduct), else of the product
// rounded; 0 below the smallest normal; exactly 1 at the best logit; 0 for masked tokens and for
// the products an overflowing 1 / T gives. Every 997th float of [-110, 0) as x - best, at four
// temperatures and at best 0 and 3.
TEST(Sampler, RulePIsExpWithinTwoUlpAndZeroBelowTheSmallestNormal) {
  const float kMin = std::numeric_limits<float>::min();
  std::vector<float> x_best;
  for (auto bits = std::bit_cast<std::uint32_t>(-110.0f); bits > 0x80000000u; bits -= 997)
    x_best.push_back(std::bit_cast<float>(bits));  // negative floats: fewer bits, nearer 0
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> edges = {0.0f, -0.0f, ninf, -1e30f, -std::numeric_limits<float>::max()};
  x_best.insert(x_best.end(), edges.begin(), edges.end());
  const int n = static_cast<int>(x_best.size());
  double worst = 0;
  for (const float best : {0.0f, 3.0f})
    for (const float inv_t : {1.0f, 1.25f, 1 / 0.7f, 1 / 3.3f}) {
      SCOPED_TRACE(testing::Message() << "best " << best << ", 1 / T " << inv_t);
      std::vector<float> x(x_best), p(x.size());
      for (float& v : x) v += best;  // x - best is x_best again where it was exact
      cpu::rule_p(p.data(), x.data(), n, best, inv_t);
      for (int i = 0; i < n - static_cast<int>(edges.size()); ++i) {
        const float a = x[i] - best;
        const double exponent = cpu::simd::kExactProduct ? static_cast<double>(a) * inv_t
                                                         : static_cast<double>(a * inv_t);
        const double want = std::exp(exponent);
        if (want < kMin * (1 - 1e-6)) {
          ASSERT_EQ(p[i], 0.0f) << "x - best " << a;
        } else if (want >= kMin * (1 + 1e-6)) {
          const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
          worst = std::max(worst, std::fabs(p[i] - want) / ulp);
          ASSERT_LE(std::fabs(p[i] - want), 2 * ulp) << "x - best " << a;
        }
      }
      EXPECT_EQ(p[n - 5], 1.0f);
      EXPECT_EQ(p[n - 4], 1.0f);
      for (int i = n - 3; i < n; ++i) EXPECT_EQ(p[i], 0.0f);
    }
  std::cout << "[ rule p   ] " << n << " values at 8 settings, at most " << worst
            << " ulp from exp\n";
  // 1 / T held to the largest float: 1 at the best logit, 0 a little below it.
  const float big = std::numeric_limits<float>::max();
  const std::vector<float> x = {1.0f, 1.0f - 0x1p-23f, 0.5f, ninf};
  std::vector<float> p(x.size());
  cpu::rule_p(p.data(), x.data(), static_cast<int>(x.size()), 1.0f, big);
  EXPECT_EQ(p, (std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f}));
}

// ---- errors -------------------------------------------------------------------------------------

TEST(Sampler, InvalidConfigsNameTheFlag) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const float t : {-0.1f, -inf, inf, std::nanf("")}) {
    SCOPED_TRACE(t);
    expect_error_mentioning<UsageError>([&] { Sampler s({.temperature = t}); },
                                        {"--temperature", ">= 0"});
  }
  for (const float p : {0.0f, -0.5f, 1.0001f, 2.0f, std::nanf("")}) {
    SCOPED_TRACE(p);
    expect_error_mentioning<UsageError>([&] { Sampler s({.top_p = p}); }, {"--top-p", "(0, 1]"});
  }
  EXPECT_NO_THROW(Sampler({.temperature = 0.0f, .top_p = 1.0f}));
}

TEST(Sampler, BadLogitsAreInputErrors) {
  Sampler s({});
  expect_error_mentioning<InputError>([&] { (void)s.sample(std::vector<float>{}); }, {"empty"});
  expect_error_mentioning<InputError>(
      [&] {
        (void)s.sample(std::vector<float>{0.0f, 1.0f, std::nanf("")});
      },
      {"logit 2", "NaN"});
  const float inf = std::numeric_limits<float>::infinity();
  expect_error_mentioning<InputError>(
      [&] {
        (void)s.sample(std::vector<float>{inf, 0.0f});
      },
      {"logit 0"});
  expect_error_mentioning<InputError>(
      [&] {
        (void)s.sample(std::vector<float>{-inf, -inf});
      },
      {"-inf"});
}

}  // namespace
}  // namespace kvheap
