// The CPU attention twin (kernels/decode_attention_cpu.hpp) on its own: against a naive
// double-precision softmax attention over awkward shapes, and bitwise stable under every way of
// splitting the work (head ranges, threads, where the rows live). The chapters' bitwise-equality
// claims rest on the second property; the first is what makes the twin a reference for the CUDA
// kernels.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "common/model/model_config.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "tests/support/counted_rows.hpp"

namespace kvheap {
namespace {

/// One batch row's cache and queries, n_ctx positions of [n_kv_heads, head_dim].
template <class T>
struct Case {
  int n_kv_heads, group, head_dim, n_ctx;
  std::vector<T> k, v;   // [n_ctx, n_kv_heads, head_dim]
  std::vector<float> q;  // [n_kv_heads * group, head_dim]

  Case(int kv, int g, int hd, int ctx, unsigned seed)
      : n_kv_heads(kv), group(g), head_dim(hd), n_ctx(ctx) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const std::size_t elems = static_cast<std::size_t>(ctx) * kv * hd;
    k.resize(elems);
    v.resize(elems);
    for (std::size_t e = 0; e < elems; ++e) {
      cpu::from_float(nd(rng), k[e]);
      cpu::from_float(nd(rng), v[e]);
    }
    q.resize(static_cast<std::size_t>(kv) * g * hd);
    for (float& x : q) x = 2.0f * nd(rng);  // peaky enough that softmax matters
  }
  [[nodiscard]] long kv_dim() const { return static_cast<long>(n_kv_heads) * head_dim; }
  [[nodiscard]] cpu::ContiguousRows<T> rows() const { return {k.data(), v.data(), kv_dim()}; }
  [[nodiscard]] cpu::AttendShape shape() const { return {n_kv_heads, group, head_dim}; }
};

/// Softmax attention in double over the stored (already rounded) values.
template <class T>
std::vector<double> naive(const Case<T>& c) {
  std::vector<double> out(c.q.size(), 0.0);
  for (int h = 0; h < c.n_kv_heads * c.group; ++h) {
    const long off = static_cast<long>(h / c.group) * c.head_dim;
    std::vector<double> s(c.n_ctx);
    for (int t = 0; t < c.n_ctx; ++t) {
      double dot = 0.0;
      for (int d = 0; d < c.head_dim; ++d)
        dot += static_cast<double>(c.q[static_cast<long>(h) * c.head_dim + d]) *
               cpu::to_float(c.k[t * c.kv_dim() + off + d]);
      s[t] = dot / std::sqrt(static_cast<double>(c.head_dim));
    }
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0.0;
    for (double& x : s) sum += (x = std::exp(x - m));
    for (int t = 0; t < c.n_ctx; ++t)
      for (int d = 0; d < c.head_dim; ++d)
        out[static_cast<long>(h) * c.head_dim + d] +=
            s[t] / sum * cpu::to_float(c.v[t * c.kv_dim() + off + d]);
  }
  return out;
}

/// The twin over all KV heads of the case in one call.
template <class T>
std::vector<float> twin(const Case<T>& c) {
  std::vector<float> out(c.q.size(), -1.0f);
  std::vector<float> scratch(cpu::attend_scratch_floats(c.n_kv_heads * c.group, c.head_dim));
  cpu::attend_kv_heads<T>(c.q.data(), c.rows(), c.n_ctx, c.shape(), 0, c.n_kv_heads, out.data(),
                          scratch.data());
  return out;
}

template <class T>
void expect_matches_naive(int group, int head_dim, int n_ctx) {
  const Case<T> c(2, group, head_dim, n_ctx, 1000u * head_dim + 10u * group + n_ctx);
  const std::vector<float> got = twin(c);
  const std::vector<double> want = naive(c);
  double scale = 0.0;
  for (double x : want) scale = std::max(scale, std::abs(x));
  for (std::size_t e = 0; e < want.size(); ++e)
    ASSERT_NEAR(got[e], want[e], 1e-5 * scale) << "element " << e << ", head_dim " << head_dim
                                               << ", group " << group << ", n_ctx " << n_ctx;
}

TEST(AttentionCpu, MatchesNaiveDoubleReferenceOverAwkwardShapes) {
  // head_dim: below one 8-lane vector, not a multiple of 8, the fast sizes, and past a 32-wide
  // output chunk by a remainder. n_ctx: one position, short and long last tiles, many tiles.
  for (int head_dim : {2, 6, 8, 12, 40, 64, 128, 136})
    for (int group : {1, 3, 4})
      for (int n_ctx : {1, 7, 8, 9, 100, 1031}) {
        expect_matches_naive<float>(group, head_dim, n_ctx);
        expect_matches_naive<cpu::BF16Bits>(group, head_dim, n_ctx);
      }
  expect_matches_naive<cpu::F16Bits>(4, 128, 333);
}

/// attend_batch over one row of `c`, with `threads` OpenMP threads.
template <class T, class Rows>
std::vector<float> batched(const Case<T>& c, const Rows& rows, int threads) {
  const cpu::AttendShape mc{c.n_kv_heads, c.group, c.head_dim};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  std::vector<float> out(c.q.size(), -1.0f);
  cpu::attend_batch<T>(
      mc, 1, [&](int) { return rows; }, [&](int) { return c.n_ctx; }, c.q.data(), out.data());
  omp_set_num_threads(saved);
  return out;
}

TEST(AttentionCpu, HeadRangesAndThreadsGiveBitwiseTheSameResult) {
  const Case<cpu::BF16Bits> c(8, 4, 64, 517, 7);
  const std::vector<float> whole = twin(c);

  // One KV head per call, as the GPU's blocks split the work.
  std::vector<float> per_head(c.q.size(), -1.0f);
  std::vector<float> scratch(cpu::attend_scratch_floats(c.group, c.head_dim));
  for (int g = 0; g < c.n_kv_heads; ++g)
    cpu::attend_kv_heads<cpu::BF16Bits>(c.q.data(), c.rows(), c.n_ctx, c.shape(), g, g + 1,
                                        per_head.data(), scratch.data());
  EXPECT_EQ(0, std::memcmp(whole.data(), per_head.data(), whole.size() * sizeof(float)));

  // attend_batch splits rows into head ranges by thread count; the numbers must not move.
  for (int threads : {1, 2, 3, 5}) {
    const std::vector<float> got = batched(c, c.rows(), threads);
    EXPECT_EQ(0, std::memcmp(whole.data(), got.data(), whole.size() * sizeof(float)))
        << threads << " threads";
  }
}

TEST(AttentionCpu, LongContextsSplitIntoChunksMergeCorrectlyWhateverTheThreads) {
  // Three chunks, the last one short: attend_batch computes them as separate items and merges
  // their softmax states. The result must match the double-precision reference, and must not
  // depend on how many threads ran the chunks.
  const int n_ctx = 2 * cpu::kAttendChunk + 77;
  const Case<cpu::BF16Bits> c(2, 4, 64, n_ctx, 21);
  const std::vector<float> one = batched(c, c.rows(), 1);
  const std::vector<double> want = naive(c);
  double scale = 0.0;
  for (double x : want) scale = std::max(scale, std::abs(x));
  for (std::size_t e = 0; e < want.size(); ++e)
    ASSERT_NEAR(one[e], want[e], 1e-5 * scale) << "element " << e;
  for (int threads : {2, 3, 5}) {
    const std::vector<float> got = batched(c, c.rows(), threads);
    EXPECT_EQ(0, std::memcmp(one.data(), got.data(), one.size() * sizeof(float)))
        << threads << " threads";
  }
}

/// Rows of a batch as a model's forward pass hands them over: prompt chunks, each a run of rows of
/// one sequence at growing contexts, between rows of other sequences. Every row must get bitwise
/// what attend_batch gives it alone, which is what makes a prompt's logits the same however it
/// is cut into chunks and whichever rows share its passes.
template <class T>
void expect_prompt_rows_as_alone(int n_kv_heads, int group, int head_dim) {
  SCOPED_TRACE(::testing::Message() << n_kv_heads << " KV heads x " << group << ", head_dim "
                                    << head_dim << ", " << sizeof(T) << "-byte cache");
  const int longest = cpu::kAttendChunk + 40;
  const Case<T> a(n_kv_heads, group, head_dim, longest, 31);  // sequence A's cache
  const Case<T> b(n_kv_heads, group, head_dim, 300, 32);      // sequence B's
  // (sequence, context) per batch row: A's first 40 positions as a prompt (row by row below
  // kRunMinContext, then one run), a decode row of B, rows of A whose contexts shrink (90, then a
  // run of 61 and 61), one row of 2 positions, and A's rows across the chunk boundary (runs of at
  // most kRunRows, of one chunk and of two).
  std::vector<std::pair<int, int>> rows;
  for (int t = 1; t <= 40; ++t) rows.emplace_back(0, t);
  rows.emplace_back(1, 300);
  for (int t : {90, 61, 61}) rows.emplace_back(0, t);
  rows.emplace_back(0, 2);
  for (int t = cpu::kAttendChunk - 9; t <= longest; ++t) rows.emplace_back(0, t);
  const int n = static_cast<int>(rows.size());
  const long q_dim = static_cast<long>(n_kv_heads) * group * head_dim;
  std::vector<float> q(n * q_dim);
  std::mt19937 rng(33);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (float& x : q) x = nd(rng);
  const auto rows_of = [&](int i) { return rows[i].first == 0 ? a.rows() : b.rows(); };
  const auto n_ctx_of = [&](int i) { return rows[i].second; };

  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<float> alone(q.size(), -1.0f);
  for (int i = 0; i < n; ++i)
    cpu::attend_batch<T>(
        a.shape(), 1, [&](int) { return rows_of(i); }, [&](int) { return n_ctx_of(i); },
        q.data() + i * q_dim, alone.data() + i * q_dim);
  // 64 threads: more than the batch's items, which are then cut into KV-head ranges, the runs'
  // (attend_span_rows over a range) too.
  for (int threads : {1, 3, 64}) {
    omp_set_num_threads(threads);
    std::vector<float> together(q.size(), -1.0f);
    cpu::attend_batch<T>(a.shape(), n, rows_of, n_ctx_of, q.data(), together.data());
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(0, std::memcmp(alone.data() + i * q_dim, together.data() + i * q_dim,
                               q_dim * sizeof(float)))
          << "row " << i << " (context " << rows[i].second << "), " << threads << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(AttentionCpu, PromptRowsInABatchGetBitwiseWhatTheyGetAlone) {
  expect_prompt_rows_as_alone<float>(2, 1, 64);  // one query head per KV head, as the stories
  expect_prompt_rows_as_alone<float>(3, 2, 24);
  expect_prompt_rows_as_alone<cpu::BF16Bits>(2, 3, 40);  // two bf16 blocks and 8 in natural order
  expect_prompt_rows_as_alone<cpu::F16Bits>(1, 6, 48);   // four heads and two, row by row
  expect_prompt_rows_as_alone<float>(8, 1, 64);  // 2 KiB rows: tiles two positions apart at most
  expect_prompt_rows_as_alone<cpu::BF16Bits>(3, 2, 12);  // a head_dim of 8 lanes and 4 alone
  // One query head per KV head, decoded four KV heads at a time (kSplitHeads), then two, then
  // one, each reading its own rows; a prompt's rows take the KV heads one at a time.
  expect_prompt_rows_as_alone<cpu::BF16Bits>(7, 1, 40);
  expect_prompt_rows_as_alone<cpu::F16Bits>(3, 1, 12);
}

/// With one query head per KV head, every range of KV heads [b, e) of `c` over [t_begin, n_ctx)
/// must give each head bitwise what it gets alone: attend_span takes such KV heads four, two or
/// one at a time (kSplitHeads), and attend_batch splits ranges by thread count.
template <class T>
void expect_head_ranges_as_alone(const Case<T>& c, int t_begin) {
  SCOPED_TRACE(::testing::Message()
               << c.n_kv_heads << " KV heads x 1, head_dim " << c.head_dim << ", " << sizeof(T)
               << "-byte cache, span [" << t_begin << ", " << c.n_ctx << ")");
  const int n = c.n_kv_heads, hd = c.head_dim;
  std::vector<float> scratch(cpu::attend_span_scratch_floats(n, hd));
  std::vector<float> acc(c.q.size(), -1.0f), max(n), sum(n);
  for (int g = 0; g < n; ++g)
    cpu::attend_span<T>(c.q.data(), c.rows(), t_begin, c.n_ctx, c.shape(), g, g + 1, acc.data(),
                        &max[g], &sum[g], scratch.data());
  for (int b = 0; b < n; ++b)
    for (int e = b + 1; e <= n; ++e) {
      std::vector<float> got(c.q.size(), -1.0f), got_max(n), got_sum(n);
      cpu::attend_span<T>(c.q.data(), c.rows(), t_begin, c.n_ctx, c.shape(), b, e, got.data(),
                          got_max.data(), got_sum.data(), scratch.data());
      const long first = static_cast<long>(b) * hd, count = static_cast<long>(e - b) * hd;
      ASSERT_EQ(0, std::memcmp(&acc[first], &got[first], count * sizeof(float)))
          << "heads [" << b << ", " << e << ")";
      ASSERT_EQ(0, std::memcmp(&max[b], got_max.data(), (e - b) * sizeof(float)));
      ASSERT_EQ(0, std::memcmp(&sum[b], got_sum.data(), (e - b) * sizeof(float)));
    }
}

TEST(AttentionCpu, OneQueryHeadPerKvHeadGivesEveryHeadRangeTheSameBits) {
  // Head dims with and without a tail past whole vectors (and bf16 blocks), short and long spans.
  // Whether a multiply and an add fuse is the compiler's choice loop by loop, so a path that ran
  // other loops for heads side by side gave some heads other bits (fp16, head_dim 12 or 100).
  for (int hd : {6, 12, 20, 48, 64, 100})
    for (int ctx : {9, 100, 300}) {
      const unsigned seed = static_cast<unsigned>(hd * 1000 + ctx);
      expect_head_ranges_as_alone(Case<float>(7, 1, hd, ctx, seed), ctx > 10 ? 3 : 0);
      expect_head_ranges_as_alone(Case<cpu::BF16Bits>(7, 1, hd, ctx, seed + 1), 0);
      expect_head_ranges_as_alone(Case<cpu::F16Bits>(6, 1, hd, ctx, seed + 2), ctx > 10 ? 5 : 0);
    }
}

/// attend_span over [t_begin, t_end) of `c` with its prefetches on and off: the same bits, no
/// position outside the span asked for either way, and more rows asked for with them on (the
/// prefetches ran).
template <class T>
void expect_prefetching_changes_nothing(const Case<T>& c, int t_begin, int t_end) {
  SCOPED_TRACE(::testing::Message() << c.n_kv_heads << " KV heads x " << c.group << ", head_dim "
                                    << c.head_dim << ", span [" << t_begin << ", " << t_end << ")");
  const int n_q = c.n_kv_heads * c.group;
  std::vector<float> scratch(cpu::attend_span_scratch_floats(n_q, c.head_dim));
  int asked[2] = {};
  std::vector<float> acc[2], max[2], sum[2];
  for (int on = 0; on < 2; ++on) {
    const test::CountedRows<T> rows{c.rows(), t_begin, t_end};
    acc[on].assign(c.q.size(), -1.0f);
    max[on].assign(n_q, -1.0f);
    sum[on].assign(n_q, -1.0f);
    cpu::attend_span_prefetching<T>(on == 1, c.q.data(), rows, t_begin, t_end, c.shape(), 0,
                                    c.n_kv_heads, acc[on].data(), max[on].data(), sum[on].data(),
                                    scratch.data());
    EXPECT_EQ(rows.outside, 0) << "positions asked for outside the span, prefetching " << on;
    asked[on] = rows.asked;
  }
  EXPECT_GT(asked[1], asked[0]) << "no rows prefetched";
  EXPECT_EQ(0, std::memcmp(acc[0].data(), acc[1].data(), acc[0].size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(max[0].data(), max[1].data(), max[0].size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(sum[0].data(), sum[1].data(), sum[0].size() * sizeof(float)));
}

TEST(AttentionCpu, PrefetchingChangesNoBitAndAsksForNoRowOutsideTheSpan) {
  // Whether attend_span prefetches depends on the CPU (span_prefetch_helps), so both ways run
  // here on every machine: Llama-3-8B's bf16 rows (2 KiB: tiles two positions apart), a model
  // with one query head per KV head (KV heads four, two and one at a time), and spans that end
  // inside the prefetched tiles.
  const Case<cpu::BF16Bits> llama(8, 4, 128, 700, 41);
  expect_prefetching_changes_nothing(llama, 0, 700);
  expect_prefetching_changes_nothing(llama, 37, 301);
  const Case<float> stories(7, 1, 48, 300, 42);
  expect_prefetching_changes_nothing(stories, 0, 300);
  expect_prefetching_changes_nothing(stories, 5, 90);
  const Case<cpu::F16Bits> small(3, 2, 24, 200, 43);
  expect_prefetching_changes_nothing(small, 1, 200);
}

TEST(AttentionCpu, TransposedSumsAddInTheOrderOfSum8) {
  // Values of mixed sign and magnitudes over a few binades, so that about half of the sums round
  // differently in another order of additions; 32 rounds of eight make a wrong order certain to
  // show.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> mag(-30.0f, 30.0f);
  for (int round = 0; round < 32; ++round) {
    cpu::simd::Vec8 a[8];
    for (auto& v : a)
      for (int l = 0; l < cpu::simd::kLanes; ++l)
        v[l] = std::ldexp(mag(rng), static_cast<int>(mag(rng)) / 6);
    const cpu::simd::Vec8 all = cpu::simd::sum8_each(a), four = cpu::simd::sum8_each4(a);
    for (int i = 0; i < 8; ++i) {
      const float want = cpu::simd::sum8(a[i]);
      ASSERT_EQ(0, std::memcmp(&want, &all[i], sizeof want)) << "sum8_each, vector " << i;
      if (i < 4) {
        ASSERT_EQ(0, std::memcmp(&want, &four[i], sizeof want)) << "sum8_each4, vector " << i;
      }
    }
  }
}

TEST(AttentionCpu, TileStridePutsATilesRowsInDifferentPages) {
  EXPECT_EQ(cpu::tile_stride(4096, 100000), 1);  // fp32 Llama-3-8B rows: a page each
  EXPECT_EQ(cpu::tile_stride(8192, 100000), 1);
  EXPECT_EQ(cpu::tile_stride(2048, 100000), 2);  // bf16 Llama-3-8B rows: two to a page
  EXPECT_EQ(cpu::tile_stride(1024, 100000), 4);
  EXPECT_EQ(cpu::tile_stride(64, 100000), cpu::kAttendTile);  // capped at a tile
  EXPECT_EQ(cpu::tile_stride(2048, 15), 1);                   // too few positions to fill two tiles
  EXPECT_EQ(cpu::tile_stride(1024, 24), 3);
  EXPECT_EQ(cpu::tile_stride(1024, 0), 1);
}

TEST(AttentionCpu, HeadRangesAreTheFewestThatKeepEveryThreadNearAnEvenShare) {
  // With no slack, the rule before it: the fewest ranges (a divisor) that give every thread the
  // same number of items, and at least one each.
  for (long threads = 1; threads <= 16; ++threads)
    for (long items = 1; items <= 40; ++items)
      for (int kvh : {1, 2, 3, 4, 6, 8, 12}) {
        int even = 1;
        while (even < kvh &&
               (kvh % even != 0 || items * even < threads || items * even % threads != 0))
          ++even;
        EXPECT_EQ(cpu::head_ranges(items, threads, kvh, 1.0), even)
            << items << " items, " << threads << " threads, " << kvh << " KV heads";
        // With the slack: a divisor that gives every thread an item and none over slack x its
        // even share, unless every head is a range of its own, and no fewer ranges would do.
        const int r = cpu::head_ranges(items, threads, kvh, cpu::kRangeSlack);
        const auto fits = [&](int ranges) {
          const long shares = items * ranges;
          const long most = (shares + threads - 1) / threads;
          return shares >= threads &&
                 static_cast<double>(most * threads) <= cpu::kRangeSlack * shares;
        };
        EXPECT_EQ(kvh % r, 0);
        if (r < kvh) {
          EXPECT_TRUE(fits(r));
        }
        for (int fewer = 1; fewer < r; ++fewer) {
          if (kvh % fewer == 0) {
            EXPECT_FALSE(fits(fewer));
          }
        }
      }
  // Two threads: 5 and 7 chunks stay whole (one thread 3 of 5, 1.2x its even share; 4 of 7); 3
  // are cut in two; 1 is cut so that both threads get one.
  EXPECT_EQ(cpu::head_ranges(5, 2, 8, cpu::kRangeSlack), 1);
  EXPECT_EQ(cpu::head_ranges(7, 2, 8, cpu::kRangeSlack), 1);
  EXPECT_EQ(cpu::head_ranges(3, 2, 8, cpu::kRangeSlack), 2);
  EXPECT_EQ(cpu::head_ranges(1, 2, 8, cpu::kRangeSlack), 2);
  EXPECT_EQ(cpu::head_ranges(1, 2, 1, cpu::kRangeSlack), 1);  // one KV head: nothing to cut
  // Every thread gets an item: 13 on 16 threads are cut in two (26: 2 for some threads, 1.23x).
  EXPECT_EQ(cpu::head_ranges(13, 16, 8, cpu::kRangeSlack), 2);
}

/// Rows stored back to front: a layout no tile boundary lines up with.
template <class T>
struct ReversedRows {
  const T* k_base;
  const T* v_base;
  long stride;
  int n_ctx;
  [[nodiscard]] const T* k(int t) const { return k_base + (n_ctx - 1 - t) * stride; }
  [[nodiscard]] const T* v(int t) const { return v_base + (n_ctx - 1 - t) * stride; }
};

/// A copy of a case's K and V rows in reverse position order, and the accessor that reads it.
template <class T>
struct ReversedCopy {
  std::vector<T> k, v;
  ReversedRows<T> rows;
  explicit ReversedCopy(const Case<T>& c)
      : k(c.k.size()), v(c.v.size()), rows{k.data(), v.data(), c.kv_dim(), c.n_ctx} {
    for (int t = 0; t < c.n_ctx; ++t) {
      const long from = t * c.kv_dim(), to = (c.n_ctx - 1 - t) * c.kv_dim();
      std::copy_n(c.k.begin() + from, c.kv_dim(), k.begin() + to);
      std::copy_n(c.v.begin() + from, c.kv_dim(), v.begin() + to);
    }
  }
  ReversedCopy(const ReversedCopy&) = delete;  // rows points into this object's vectors
  ReversedCopy& operator=(const ReversedCopy&) = delete;
};

/// The reversed layout gives bitwise what the contiguous one gives, in one call and through
/// attend_batch for a context of two chunks.
template <class T>
void expect_layout_independent(int head_dim) {
  const Case<T> c(2, 2, head_dim, 77, 11);
  const ReversedCopy<T> r(c);
  std::vector<float> out(c.q.size(), -1.0f);
  std::vector<float> scratch(cpu::attend_scratch_floats(4, c.head_dim));
  cpu::attend_kv_heads<T>(c.q.data(), r.rows, c.n_ctx, c.shape(), 0, 2, out.data(), scratch.data());
  const std::vector<float> contiguous = twin(c);
  EXPECT_EQ(0, std::memcmp(contiguous.data(), out.data(), out.size() * sizeof(float)));

  const Case<T> l(2, 2, head_dim, cpu::kAttendChunk + 300, 12);
  const ReversedCopy<T> lr(l);
  const std::vector<float> reversed = batched(l, lr.rows, 2);
  const std::vector<float> forward = batched(l, l.rows(), 2);
  EXPECT_EQ(0, std::memcmp(forward.data(), reversed.data(), forward.size() * sizeof(float)));
}

TEST(AttentionCpu, OnlyAddressesDependOnTheLayout) {
  expect_layout_independent<float>(24);
  // bf16 holds whole blocks of 16 interleaved: 40 is two such blocks and 8 in natural order.
  expect_layout_independent<cpu::BF16Bits>(40);
}

TEST(AttentionCpu, EmptyContextGivesZeros) {
  const Case<float> c(2, 2, 8, 1, 3);
  std::vector<float> out(c.q.size(), -1.0f);
  std::vector<float> scratch(cpu::attend_scratch_floats(4, c.head_dim));
  cpu::attend_kv_heads<float>(c.q.data(), c.rows(), 0, c.shape(), 0, 2, out.data(), scratch.data());
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace kvheap
