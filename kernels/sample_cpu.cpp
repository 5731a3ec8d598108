// The next token of each logit row on the host (the twin of sample.cu), the rule in sample.hpp.
//
// A greedy row costs one pass over its logits, in 16 lanes the compiler vectorises, and a look
// into the one block of 2048 that holds the largest logit for its index. A draw adds one
// vectorised pass that computes p = exp((logit - best) / T) by exp_product (kernels/exp_simd.hpp:
// with AVX-512, a table of 2^(j/32) and a polynomial of degree 2, the product never rounded;
// docs/results/serving-loop-amd-epyc-zen4.md has what it saved). A top-p 1 draw sums p a chunk at a
// time and walks the one chunk its number falls in. A top-p < 1 draw keeps, in the same pass, only
// the candidates: the tokens of p at least half of (1 - top_p) / (vocab - 1) * S, with their
// indices. No other token is in the nucleus, since even vocab - 1 tokens of that size hold less
// than 1 - top_p of the mass, and a model's logits leave few tokens above it. It bins the
// candidates' mass by p's float bits (8 buckets an octave, in p's order), sums the buckets from the
// top to the one where the mass crosses top_p * S, and sorts only that bucket's p: tau in linear
// time, the vocabulary never sorted. The walk then runs over the candidates. Rows run in parallel
// on the OpenMP threads.
//
// With AVX-512 a draw makes one pass where the above makes two (one_pass): the scan runs a block
// ahead of the exponential, which sums each block's p against the largest logit of the blocks
// scanned so far; each block's sum is scaled to best's at the end. The scan's comparisons and the
// exponential's multiply-adds then share the loop, where the two passes paid for both in turn. Its
// exponential serves the sums only, so it takes the product x c log2(e) rounded (each block's
// frame is scaled away exactly), and the scan keeps no second and no |x| (second comes from the
// blocks' largest logits and the top block, max |x| from the largest and smallest): the loop
// issues 13 vector instructions a vector of 16 tokens where it issued 17. A top-p < 1 draw picks
// its candidates afterwards, once S is known, by their logits (x at least best + T ln(the bound))
// in the blocks whose largest logit reaches that floor, and computes their p from best as above.
// docs/results/serving-loop-amd-epyc-zen4.md has the times.
#include <Eigen/Core>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "base/error.hpp"
#include "kernels/exp_simd.hpp"
#include "kernels/sample.hpp"

namespace kvheap::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

constexpr int kScanLanes = 16;    // a row's scan keeps 16 lanes apart
constexpr int kScanBlock = 2048;  // tokens of a block of the scan

/// The row's SampledToken from the scan's lanes (kScanLanes of each: best, second and max_abs),
/// whether a NaN was met, and the first block that holds best (see scan_row).
SampledToken finish_scan(const float* best, const float* second, const float* max_abs, bool bad,
                         int top_block, const float* x, int n, bool index);

/// best, second and max_abs of a row, and best's index if `index` is set, or token kNaNLogit. One
/// pass in kLanes independent lanes (each keeps its own best, second below it, max |x| and NaN
/// flag; no index), blocks of kBlock tokens at a time: the last block at which the running largest
/// value rose is the first that holds best, and a greedy row finds best's lowest index there after
/// the pass. A draw looks it up only where best is 0, so that best takes the first zero's sign (-0
/// and +0 are equal), as on the device: elsewhere the lookup would only add a second read of that
/// block to every draw. Lanes merge without indices: second is the largest of the lanes' seconds
/// and of all their bests but one copy of the top. A NaN lifts its lane's second to the lane's best
/// (std::min(best, v) gives best), so a row that holds one is scanned again by a plain loop that
/// leaves the NaN out, as the device does: such a row is an error, and rare. (std::min(v, best)
/// would give v, but GCC then vectorises no part of the loop.) Inlined into both callers: out of
/// line, as GCC 12 left it once the one pass called it too, a greedy row ran slower
/// (docs/results/serving-loop-amd-epyc-zen4.md).
__attribute__((always_inline)) inline SampledToken scan_row(const float* x, int n, bool index) {
  constexpr int kLanes = kScanLanes, kBlock = kScanBlock;
  alignas(64) float best[kLanes], second[kLanes], max_abs[kLanes];
  alignas(64) int nan[kLanes];
  for (int k = 0; k < kLanes; ++k) {
    best[k] = second[k] = -kInf;
    max_abs[k] = 0;
    nan[k] = 0;
  }
  const auto take = [&](int k, float v) __attribute__((always_inline)) {
    nan[k] |= static_cast<int>(v != v);
    second[k] = std::max(second[k], std::min(best[k], v));
    best[k] = std::max(best[k], v);
    max_abs[k] = std::max(max_abs[k], std::fabs(v));
  };
  float top = -kInf;  // the largest value of the blocks so far
  int top_block = 0;  // the first block that holds it
  int i = 0;
  for (int from = 0; from < n; from += kBlock) {
    const int to = std::min(n, from + kBlock);
    for (; i + kLanes <= to; i += kLanes) {
#pragma GCC ivdep
      for (int k = 0; k < kLanes; ++k) take(k, x[i + k]);
    }
    for (; i < to; ++i) take(0, x[i]);  // the row's tail: lane 0
    float block_top = -kInf;
    for (int k = 0; k < kLanes; ++k) block_top = std::max(block_top, best[k]);
    if (block_top > top) {
      top = block_top;
      top_block = from / kBlock;
    }
  }
  bool bad = false;
  for (int k = 0; k < kLanes; ++k) bad = bad || nan[k] != 0;
  return finish_scan(best, second, max_abs, bad, top_block, x, n, index);
}

SampledToken finish_scan(const float* best, const float* second, const float* max_abs, bool bad,
                         int top_block, const float* x, int n, bool index) {
  SampledToken t{0, -kInf, -kInf, 0};
  int lanes_at_top = 0;
  for (int k = 0; k < kScanLanes; ++k) {
    t.max_abs = std::max(t.max_abs, max_abs[k]);
    t.best = std::max(t.best, best[k]);
  }
  for (int k = 0; k < kScanLanes; ++k) {
    t.second = std::max(t.second, second[k]);
    if (best[k] == t.best)
      ++lanes_at_top;
    else
      t.second = std::max(t.second, best[k]);
  }
  if (lanes_at_top > 1) t.second = t.best;
  if (bad) {
    t = {SampledToken::kNaNLogit, -kInf, -kInf, 0};
    bool any = false;
    for (int j = 0; j < n; ++j) {
      const float v = x[j];
      if (v != v) continue;
      t.max_abs = std::max(t.max_abs, std::fabs(v));
      if (!any || v > t.best) {
        if (any) t.second = std::max(t.second, t.best);
        t.best = v;
        any = true;
      } else {
        t.second = std::max(t.second, v);
      }
    }
  } else if (index || t.best == 0.0f) {  // a draw too where best is 0: the first zero's sign
    const int to = std::min(n, (top_block + 1) * kScanBlock);
    for (int j = top_block * kScanBlock; j < to; ++j)
      if (x[j] == t.best) {
        t.token = j;
        t.best = x[j];  // of +0 and -0, the one at that index
        break;
      }
  }
  return t;
}

using Packet = Eigen::internal::packet_traits<float>::type;
constexpr int kP = Eigen::internal::packet_traits<float>::size;  // floats per vector

/// The rule's p of one x - best <= 0, as a vector's lanes get it (the tails of rows that are no
/// whole number of vectors); k = product_exp(inv_temperature).
float exp_of_one(float x_best, const simd::ProductExp& k) {
  alignas(64) std::array<float, kP> v{};
  v.fill(x_best);
  Eigen::internal::pstore(v.data(), simd::exp_product(Eigen::internal::pload<Packet>(v.data()), k));
  return v[0];
}

/// Sum of the rule's p over x[0, n); each p also goes to `keep`, a vector at a time (keep.vec(i,
/// v), i being the vector's first token) and then the row's tail one by one (keep.one(i, p)). Out
/// of line: inlined into the draws, its constants and sums spilled to the stack. The keep and the
/// factor are copied in: through the references, every store of a kept p might change them, and
/// the loop read them again from memory at each vector. kSplit is inv_t.split, a constant, so
/// that exp_product's test of it leaves the loop.
template <bool kSplit, class Keep>
__attribute__((noinline)) double sum_p_as(const float* x, int n, float best, simd::ProductExp inv_t,
                                          Keep& keep_out) {
  using namespace Eigen::internal;
  inv_t.split = kSplit;
  Keep keep = keep_out;
  const Packet b = pset1<Packet>(best);
  Packet acc[2] = {pset1<Packet>(0.0f), pset1<Packet>(0.0f)};
  int i = 0;
  for (; i + 2 * kP <= n; i += 2 * kP)
    for (int k = 0; k < 2; ++k) {
      const Packet v = simd::exp_product(psub(ploadu<Packet>(x + i + k * kP), b), inv_t);
      keep.vec(i + k * kP, v);
      acc[k] = padd(acc[k], v);
    }
  float sum = predux(padd(acc[0], acc[1]));
  for (; i < n; ++i) {
    const float v = exp_of_one(x[i] - best, inv_t);
    keep.one(i, v);
    sum += v;
  }
  keep_out = keep;
  return sum;
}
template <class Keep>
double sum_p(const float* x, int n, float best, const simd::ProductExp& inv_t, Keep& keep) {
  return inv_t.split ? sum_p_as<true>(x, n, best, inv_t, keep)
                     : sum_p_as<false>(x, n, best, inv_t, keep);
}

/// sum_p's keeps: none, every p into p[0, n), and a top-p < 1 draw's candidates (draw_nucleus).
struct KeepNone {
  void vec(int, Packet) {}
  void one(int, float) {}
};
struct KeepAll {
  float* p;
  void vec(int i, Packet v) { Eigen::internal::pstoreu(p + i, v); }
  void one(int i, float v) { p[i] = v; }
};
#if defined(__AVX512F__)
/// The lanes of v under `keep` packed to cp + at and their indices (`first` + their lane) to ci +
/// at, each with a whole vector store (kP entries of room past what is kept); at moves past them.
inline void pack_lanes(__mmask16 keep, __m512 v, int first, float* cp, int* ci, int& at) {
  const __m512i index =
      _mm512_add_epi32(_mm512_set1_epi32(first),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  _mm512_storeu_ps(cp + at, _mm512_maskz_compress_ps(keep, v));
  _mm512_storeu_si512(ci + at, _mm512_maskz_compress_epi32(keep, index));
  at += std::popcount(static_cast<unsigned>(keep));
}
#endif

/// The p of at least `bound` go to cp and ci from entry `at`, with their indices (`first` being
/// x[0]'s), in index order; cp and ci need room for kP entries more than are kept: a vector's kept
/// lanes are stored packed, with a whole vector store.
struct KeepCandidates {
  float bound;
  int first;
  float* cp;
  int* ci;
  int at = 0;
  void vec(int i, Packet v) {
    using namespace Eigen::internal;
#if defined(__AVX512F__)
    static_assert(kP == 16, "a vector is an __m512");
    const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_set1_ps(bound), _CMP_GE_OQ);
    if (keep != 0) pack_lanes(keep, v, first + i, cp, ci, at);
#else
    if (!predux_any(pcmp_le(pset1<Packet>(bound), v))) return;
    alignas(64) float lanes[kP];
    pstore(lanes, v);
    for (int k = 0; k < kP; ++k) one(i + k, lanes[k]);
#endif
  }
  void one(int i, float v) {
    if (!(v >= bound)) return;
    cp[at] = v;
    ci[at++] = first + i;
  }
};

/// Per-thread scratch: one chunk's p, the chunks' sums (and, in the one-pass draw, each chunk's
/// frame, from the largest logit up to its end, its own largest logit, its lanes' largest logits
/// and their p), a top-p < 1 draw's candidates (their p and indices), the mass of each bucket, the
/// crossing bucket's p.
struct Scratch {
  std::vector<float> p;
  std::vector<float> chunks;
  std::vector<double> ref_octaves;
  std::vector<float> chunk_max;
  std::vector<float> lane_max;
  std::vector<float> lane_p;
  std::vector<float> cand_p;
  std::vector<int> cand_i;
  std::vector<double> mass;
  std::vector<float> crossing;
};

constexpr int kChunk = kScanBlock;  // tokens a draw sums at a time: the scan's blocks
constexpr int kSpan = 256;  // tokens a walk adds up by vectors before it goes token by token
static_assert(kSpan % kP == 0, "a span is whole vectors");
static_assert(kChunk % kP == 0, "a chunk is whole vectors");

/// The row's p summed a chunk at a time into s.chunks, without being stored; returns S.
double chunk_sums(const float* x, int n, float best, const simd::ProductExp& inv_t, Scratch& s) {
  const int chunks = (n + kChunk - 1) / kChunk;
  s.chunks.resize(static_cast<std::size_t>(chunks));
  double sum = 0;
  KeepNone none;
  for (int c = 0; c < chunks; ++c) {
    const int len = std::min(kChunk, n - c * kChunk);
    s.chunks[static_cast<std::size_t>(c)] =
        static_cast<float>(sum_p(x + c * kChunk, len, best, inv_t, none));
    sum += s.chunks[static_cast<std::size_t>(c)];
  }
  return sum;
}

/// A top-p 1 draw: every token is in. s.chunks holds each chunk's sum of p (chunk_sums, or the
/// one pass); only the chunk the draw falls in is computed again and walked.
int walk_full(const float* x, int n, const SamplingJob& job, float best, Scratch& s) {
  const simd::ProductExp inv_t = simd::product_exp(job.inv_temperature);
  const int chunks = (n + kChunk - 1) / kChunk;
  double sum = 0;
  for (int c = 0; c < chunks; ++c) sum += s.chunks[static_cast<std::size_t>(c)];
  const double goal = static_cast<double>(job.u) * sum;
  double cdf = 0;
  int walk = -1, last = -1;  // the chunk the draw falls in; the last chunk holding mass
  for (int c = 0; c < chunks; ++c) {
    const float chunk = s.chunks[static_cast<std::size_t>(c)];
    if (chunk <= 0.0f) continue;
    last = c;
    if (walk < 0 && goal < cdf + chunk) walk = c;
    if (walk < 0) cdf += chunk;
  }
  const int c = walk >= 0 ? walk : last;  // rounding past the last chunk: the last token there
  const int len = std::min(kChunk, n - c * kChunk);
  s.p.resize(static_cast<std::size_t>(len));
  KeepAll all{s.p.data()};
  sum_p(x + c * kChunk, len, best, inv_t, all);
  // The spans wholly before the one the draw falls in are added by their vectorised sums; the
  // walk goes token by token from that span on.
  const float* p = s.p.data();
  int from = 0;
  if (walk >= 0)
    for (; from + kSpan <= len; from += kSpan) {
      using namespace Eigen::internal;
      Packet acc = pset1<Packet>(0.0f);
      for (int i = from; i < from + kSpan; i += kP) acc = padd(acc, ploadu<Packet>(p + i));
      const double mass = predux(acc);
      if (goal < cdf + mass) break;
      cdf += mass;
    }
  int token = -1;
  for (int i = from; i < len; ++i) {
    if (p[i] <= 0.0f) continue;
    cdf += p[i];
    token = c * kChunk + i;
    if (walk >= 0 && goal < cdf) break;
  }
  // Rounding past every token from `from` on, none of which can occur: the last one before it.
  for (int i = from - 1; token < 0 && i >= 0; --i)
    if (p[i] > 0.0f) token = c * kChunk + i;
  return token;
}

/// p's bucket: the top 12 bits of its float (sign 0, the exponent, 3 bits of the mantissa), so
/// that buckets order as p does, 8 to an octave, from p = 0 (bucket 0) to p = 1.
int bucket_of(float p) { return static_cast<int>(std::bit_cast<std::uint32_t>(p) >> 20); }
constexpr int kBuckets = (0x3F800000 >> 20) + 1;  // up to the bucket of 1.0f
/// Candidates from which select_threshold bins into four copies of the buckets.
constexpr int kManyCandidates = 4096;

/// What the nucleus' cut is: tau, the largest p whose "mass of p >= tau" exceeds the target,
/// with the mass of p > tau and the count of p == tau.
struct Threshold {
  float tau = 0;
  double mass_above = 0;  // of p > tau
  long ties = 0;          // of p == tau
};

/// tau over the candidates p[0, n) in linear time, or nothing where rounding of S left their whole
/// mass short of `target`: their mass binned by bucket_of; the buckets summed from the top to the
/// one where the mass crosses `target`; that bucket's few p sorted and summed on to the crossing.
/// Every token of a higher bucket has a larger p, so the mass above tau is the higher buckets' and
/// the crossing bucket's above tau. The candidates must hold every token of p >= `bound`, a bound
/// below tau.
std::optional<Threshold> select_threshold(const float* p, int n, double target, double bound,
                                          Scratch& s) {
  using namespace Eigen::internal;
  // A vector whose p are all below `bound` holds no token of the nucleus and is skipped: the
  // crossing lies among the tokens at or above it, which are all counted, so the buckets below it
  // may be counted in part. (The candidates of a draw's first chunks were kept by a lower bound.)
  // The vector's p are widened to double together first: widened one by one, each conversion
  // (cvtss2sd) merges into its register's last value, and every add waits on the one before it
  // (docs/results/serving-loop-amd-epyc-zen3.md has the times).
  // Where many tokens are candidates, lane k adds into copy k % 4 of the buckets: neighbours in one
  // bucket, common on a flat row, then go to four sums, where into one each add waited on the last
  // through memory. The copies are summed at the end.
  constexpr int kCopies = 4;
  const int copies = n >= kManyCandidates ? kCopies : 1;
  s.mass.assign(static_cast<std::size_t>(copies) * kBuckets, 0.0);
  double* h = s.mass.data();
  std::array<double*, kCopies> hk;
  for (int c = 0; c < kCopies; ++c) hk[c] = h + (c % copies) * kBuckets;
  const Packet vbound = pset1<Packet>(static_cast<float>(bound));
  std::array<double, kP> wide;
  int i = 0;
  for (; i + kP <= n; i += kP) {
    if (!predux_any(pcmp_le(vbound, ploadu<Packet>(p + i)))) continue;
    for (int k = 0; k < kP; ++k) wide[k] = p[i + k];
    for (int k = 0; k < kP; ++k) hk[k % kCopies][bucket_of(p[i + k])] += wide[k];
  }
  for (; i < n; ++i) h[bucket_of(p[i])] += p[i];
  for (int c = 1; c < copies; ++c)
    for (int b = 0; b < kBuckets; ++b) h[b] += h[c * kBuckets + b];
  double before = 0;
  int cross = 0;  // bucket 0 holds only p = 0
  for (int b = kBuckets - 1; b > 0 && cross == 0; --b) {
    if (before + h[b] > target)
      cross = b;
    else
      before += h[b];
  }
  if (cross == 0) return std::nullopt;
  // The crossing bucket's p: those in [lo, hi), found a vector at a time.
  const float lo = std::bit_cast<float>(static_cast<std::uint32_t>(cross) << 20);
  const float hi = std::bit_cast<float>(static_cast<std::uint32_t>(cross + 1) << 20);
  const Packet vlo = pset1<Packet>(lo), vhi = pset1<Packet>(hi);
  s.crossing.clear();
  for (i = 0; i + kP <= n; i += kP) {
    const Packet v = ploadu<Packet>(p + i);
    if (!predux_any(pand(pcmp_le(vlo, v), pcmp_lt(v, vhi)))) continue;
    for (int k = i; k < i + kP; ++k)
      if (bucket_of(p[k]) == cross) s.crossing.push_back(p[k]);
  }
  for (; i < n; ++i)
    if (bucket_of(p[i]) == cross) s.crossing.push_back(p[i]);
  std::sort(s.crossing.begin(), s.crossing.end(), std::greater<>());
  // Only rounding leaves the sum short within the bucket: its smallest p then.
  float tau = s.crossing.empty() ? 0.0f : s.crossing.back();
  double crossed = before;
  for (const float pc : s.crossing) {
    crossed += pc;
    if (crossed > target) {
      tau = pc;
      break;
    }
  }
  Threshold th{tau, before, 0};
  for (const float pc : s.crossing) {
    if (pc > tau) th.mass_above += pc;
    if (pc == tau) ++th.ties;
  }
  return th;
}

/// Half of (1 - top_p) / (vocab - 1): times S, the bound below which a top-p < 1 draw keeps no
/// candidate (draw_nucleus).
double nucleus_per_token(const SamplingJob& job, int n) {
  return 0.5 * (1.0 - job.top_p) / std::max(n - 1, 1);
}

int draw_nucleus_from(const float* x, int n, const SamplingJob& job, float best, double sum,
                      int kept, Scratch& s);

/// A top-p < 1 draw. No token of p below (1 - top_p) / (vocab - 1) * S is in the nucleus: even
/// vocab - 1 tokens of that size hold less than 1 - top_p of the mass. So the exponential's pass
/// keeps only the candidates, the tokens of p at or above that bound, with their indices, and
/// stores no other p. S is not known before the last chunk (kChunk tokens), so each chunk takes
/// the bound of the S summed before it (never above the bound of S: S only grows, and is at
/// least best's p, 1), halved against the rounding of the sums. Then tau from the candidates, and
/// the walk in index order over the nucleus, a span of candidates at a time by the spans' masses
/// (vectorised), and within the span that holds the draw token by token. The p of a model's
/// logits are mostly far below the bound, so what follows the p runs on a few candidates.
int draw_nucleus(const float* x, int n, const SamplingJob& job, float best, Scratch& s) {
  const double per_token = nucleus_per_token(job, n);
  s.cand_p.resize(static_cast<std::size_t>(n) + kP);
  s.cand_i.resize(static_cast<std::size_t>(n) + kP);
  s.chunks.resize(static_cast<std::size_t>((n + kChunk - 1) / kChunk));
  double sum = 0;
  KeepCandidates keep{0, 0, s.cand_p.data(), s.cand_i.data()};
  const simd::ProductExp inv_t = simd::product_exp(job.inv_temperature);
  for (int c0 = 0; c0 < n; c0 += kChunk) {
    keep.bound = static_cast<float>(std::min(1.0, per_token * std::max(sum, 1.0)));
    keep.first = c0;
    const double chunk = sum_p(x + c0, std::min(kChunk, n - c0), best, inv_t, keep);
    s.chunks[static_cast<std::size_t>(c0 / kChunk)] = static_cast<float>(chunk);
    sum += chunk;
  }
  return draw_nucleus_from(x, n, job, best, sum, keep.at, s);
}

/// The rest of a top-p < 1 draw, once the pass has left S (`sum`), each chunk's sum of p in
/// s.chunks, and the `kept` candidates' p and indices in s.cand_p and s.cand_i.
int draw_nucleus_from(const float* x, int n, const SamplingJob& job, float best, double sum,
                      int kept, Scratch& s) {
  using namespace Eigen::internal;
  const double per_token = nucleus_per_token(job, n);
  const double need = static_cast<double>(job.top_p) * sum;
  const double bound = std::min(1.0, per_token * sum);
  const std::optional<Threshold> cut = select_threshold(s.cand_p.data(), kept, need, bound, s);
  // Rounding of S left the candidates' whole mass short of the target: every token is in (tau 0,
  // as on the device), the draw of top-p 1.
  if (!cut) return walk_full(x, n, job, best, s);
  const Threshold& th = *cut;
  const float* p = s.cand_p.data();
  // Of the tokens at tau, the first k by index: the fewest that carry the mass past top_p * S.
  const long k = fewest_ties(need, th.mass_above, th.tau,
                             static_cast<int>(std::min<long>(std::max(th.ties, 1L), 1L << 30)));
  const double goal =
      static_cast<double>(job.u) * (th.mass_above + static_cast<double>(k) * th.tau);
  // Spans: the mass of p > tau and the count of p == tau, the ties in until k are.
  const Packet vtau = pset1<Packet>(th.tau), one = pset1<Packet>(1.0f);
  double cdf = 0;
  long ties_before = 0;       // of the spans walked past
  long ties_before_last = 0;  // of the spans before the last one that holds mass
  int from = 0, last_span = -1;
  for (; from < kept; from += kSpan) {
    const int len = std::min(kSpan, kept - from);
    Packet above = pset1<Packet>(0.0f), at = pset1<Packet>(0.0f);
    int i = from;
    for (; i + kP <= from + len; i += kP) {
      const Packet v = ploadu<Packet>(p + i);
      above = padd(above, pand(v, pcmp_lt(vtau, v)));
      at = padd(at, pand(one, pcmp_eq(v, vtau)));
    }
    double mass = predux(above);
    long ties = std::lround(predux(at));
    for (; i < from + len; ++i) {
      if (p[i] > th.tau) mass += p[i];
      if (p[i] == th.tau) ++ties;
    }
    const long ties_in = std::clamp(k - ties_before, 0L, ties);
    mass += static_cast<double>(ties_in) * th.tau;
    if (mass <= 0) {
      ties_before += ties;
      continue;
    }
    if (goal < cdf + mass) break;
    cdf += mass;
    ties_before_last = ties_before;
    ties_before += ties;
    last_span = from;
  }
  if (from >= kept) {  // rounding past the nucleus' mass: the last token of its last span
    from = std::max(last_span, 0);
    cdf = -std::numeric_limits<double>::infinity();
    ties_before = ties_before_last;
  }
  int last = -1;
  for (int i = from; i < kept; ++i) {
    const float pc = p[i];
    if (pc < th.tau || pc <= 0.0f || (pc == th.tau && ties_before++ >= k)) continue;
    cdf += pc;
    last = i;
    if (goal < cdf) break;
  }
  return last >= 0 ? s.cand_i[static_cast<std::size_t>(last)] : -1;
}

/// The draw of `job` on a row whose scan gave `t` (no NaN in it).
int draw(const float* x, int n, const SamplingJob& job, const SampledToken& t, Scratch& s) {
  if (t.best == kInf) return SampledToken::kInfLogit;
  if (t.best == -kInf) return SampledToken::kNoTokenAllowed;
  if (job.top_p < 1.0f) return draw_nucleus(x, n, job, t.best, s);
  chunk_sums(x, n, t.best, simd::product_exp(job.inv_temperature), s);
  return walk_full(x, n, job, t.best, s);
}

#if defined(__AVX512F__)
/// What a draw's one pass leaves beside s.chunks, s.ref_octaves and s.chunk_max: the row's largest
/// and smallest logits (NaN left out of both), the first block that holds the largest, and whether
/// a block it did not sum (every logit up to it -inf) holds a NaN. A NaN elsewhere makes its
/// block's sum NaN.
struct OnePass {
  float best = -kInf;
  float low = kInf;
  int top_block = 0;
  bool nan = false;
};

// max and min of two vectors, b where either is NaN (maxps and minps). GCC 12 builds the unmasked
// intrinsics from _mm512_undefined_ps and warns of it (-Wuninitialized); zero-masked with every
// lane kept, they are the same instruction.
__m512 max16(__m512 a, __m512 b) { return _mm512_maskz_max_ps(0xFFFF, a, b); }
__m512 min16(__m512 a, __m512 b) { return _mm512_maskz_min_ps(0xFFFF, a, b); }

/// The largest of v's lanes (none NaN): halves, quarters, eighths and pairs folded by permutes.
float lanes_max(__m512 v) {
  for (const int k : {8, 4, 2, 1}) {
    const __m512i swap =
        _mm512_xor_si512(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(k));
    v = max16(v, _mm512_maskz_permutexvar_ps(0xFFFF, swap, v));
  }
  return _mm512_cvtss_f32(v);
}
float lanes_min(__m512 v) {
  return -lanes_max(_mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u)))));
}

/// The lanes of a vector that hold the first `left` of the tokens from it on (all 16 if left >=
/// 16).
__mmask16 lanes_to(int left) {
  return static_cast<__mmask16>(left >= kP ? 0xFFFF : (1u << left) - 1);
}

/// Whether x[0, n) holds a NaN.
bool holds_nan(const float* x, int n) {
  __mmask16 any = 0;
  for (int i = 0; i < n; i += kP) {
    const __mmask16 lanes = lanes_to(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(lanes, x + i);
    any |= _mm512_mask_cmp_ps_mask(lanes, v, v, _CMP_UNORD_Q);
  }
  return any != 0;
}

/// 2^f over [0, 1/32) ~ kExp2FloorPoly[0] + f (kExp2FloorPoly[1] + f kExp2FloorPoly[2]):
/// exp_product's polynomial, which holds over |g| <= 1/64, moved to f = g + 1/64 (2^f = 2^(1/64)
/// 2^g) and multiplied out in double, then rounded to float: 1.1e-7 of 2^f at most. The one pass
/// sums p by it, its split rounding y down, not to nearest.
constexpr double kRoot64 = 0x1.02c9a3e778061p+0;  // 2^(1/64)
constexpr double kH = 1.0 / 64;
constexpr std::array<float, 3> kExp2FloorPoly = {
    static_cast<float>(
        kRoot64 * (1 - kH * simd::detail::kExp2Poly[0] + kH * kH * simd::detail::kExp2Poly[1])),
    static_cast<float>(kRoot64*(simd::detail::kExp2Poly[0] - 2 * kH * simd::detail::kExp2Poly[1])),
    static_cast<float>(kRoot64* simd::detail::kExp2Poly[1])};

/// A draw's one pass over its row (AVX-512): the row's largest and smallest logits and the sums of
/// p, in one loop. The exponential needs the largest logit, which the scan finds, so the loop runs
/// a chunk behind: it scans chunk c + 1 while it sums the p of chunk c against `ref`, the largest
/// logit of chunks 0 to c, both chunks in L1. The scan's comparisons then run on other pipes beside
/// the exponential's multiply-adds, where two passes paid for both in turn. Each chunk's sum goes
/// to s.chunks, in the frame s.ref_octaves (its p are 2^(x c log2(e) - that)), for the caller to
/// scale to best's. The scan keeps no second (the caller finds it from the chunks' largest logits
/// and the top chunk) and takes max |x| from the largest and smallest: each costs the loop an
/// instruction a vector.
__attribute__((noinline)) void one_pass(const float* x, int n, const simd::ProductExp& inv_t,
                                        Scratch& s, OnePass& out) {
  const __m512 ninf = _mm512_set1_ps(-kInf), pinf = _mm512_set1_ps(kInf);
  // The largest and smallest logits of the row so far, and of the chunk being scanned (merged at
  // its end, so that each chunk's largest logit is known). A NaN lifts neither.
  __m512 best = ninf, low = pinf, chunk_best = ninf, chunk_low = pinf;
  const auto scan = [&](__m512 v) __attribute__((always_inline)) {
    chunk_best = max16(v, chunk_best);
    chunk_low = min16(v, chunk_low);
  };
  // A span's vectors, then its tail with the lanes past it left out.
  const auto scan_span = [&](const float* p, int len) __attribute__((always_inline)) {
    int i = 0;
    for (; i + kP <= len; i += kP) scan(_mm512_loadu_ps(p + i));
    if (i < len) {
      const __mmask16 lanes = lanes_to(len - i);
      chunk_best = max16(_mm512_mask_loadu_ps(ninf, lanes, p + i), chunk_best);
      chunk_low = min16(_mm512_mask_loadu_ps(pinf, lanes, p + i), chunk_low);
    }
  };
  // A logit this far from 0, or a ref this far, can put the fast exponential's y below -2^20 (see
  // it below): half of 2^20 octaves.
  const float far_limit = static_cast<float>(0x1p19 / static_cast<double>(inv_t.octaves_hi));
  const __m512 far = _mm512_set1_ps(far_limit);
  // The chunk just scanned into the row's; its largest logit goes to s.chunk_max[c]; returns
  // whether it holds a logit as far as far_limit from 0 or an infinity (a chunk of fewer than 16
  // tokens too: its lanes left at infinity).
  const auto end_chunk = [&](int c) __attribute__((always_inline)) {
    const bool is_far = (_mm512_cmp_ps_mask(_mm512_abs_ps(chunk_best), far, _CMP_NLT_UQ) |
                         _mm512_cmp_ps_mask(_mm512_abs_ps(chunk_low), far, _CMP_NLT_UQ)) != 0;
    best = max16(chunk_best, best);
    low = min16(chunk_low, low);
    s.chunk_max[static_cast<std::size_t>(c)] = lanes_max(chunk_best);
    _mm512_storeu_ps(s.lane_max.data() + static_cast<std::size_t>(c) * kScanLanes, chunk_best);
    chunk_best = ninf;
    chunk_low = pinf;
    return is_far;
  };
  // The exponential, for the sums only (a draw computes again the p it compares), with c log2(e)
  // in one float (3e-8 of y). Where a chunk's logits and ref lie within far_limit of 0, fast: y = x
  // c log2(e) - r, r = ref c log2(e) rounded to a float (the chunk's frame, scaled away by the
  // caller), so that no subtraction comes first; y rounded down to a multiple of 1/32 by adding 1.5
  // x 2^18 (its last five bits index the table of 2^(j/32)); the rest of y, in [0, 1/32), by
  // vreduceps; 2^floor(y) by vscalefps of y itself. 8 instructions (vscalefps counted once), 4 of
  // them multiply-adds. Elsewhere (a chunk that holds ref itself, an infinity, a logit far from the
  // others, a temperature near 0), exact: x - ref first, held to -160 octaves by a float maximum
  // (which keeps a NaN: the sum then tells of it), and split as exp_product splits it; p of ref is
  // then 1. Neither has a mask for the p below the smallest normal float, which the rule makes 0:
  // they add less than the chunk's count times that float to its sum, and the caller sets the sum
  // of a chunk whose largest p is 0 to 0. On Zen 4 the comparisons of the scan, the adds and
  // vscalefps share two of the four pipes, and the multiply-adds have the other two: the fast
  // split's round-down add is a multiply-add by 1.
  const __m512 octaves = _mm512_set1_ps(inv_t.octaves_hi);
  const __m512 shift = _mm512_set1_ps(0x1.8p18f), neg_shift = _mm512_set1_ps(-0x1.8p18f);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 c1 = _mm512_set1_ps(simd::detail::kExp2Poly[1]);
  const __m512 c0 = _mm512_set1_ps(simd::detail::kExp2Poly[0]);
  const __m512 e0 = _mm512_set1_ps(kExp2FloorPoly[0]), e1 = _mm512_set1_ps(kExp2FloorPoly[1]),
               e2 = _mm512_set1_ps(kExp2FloorPoly[2]);
  const __m512 tlo = _mm512_load_ps(simd::detail::kExp2Table);
  const __m512 thi = _mm512_load_ps(simd::detail::kExp2Table + 16);
  const float deepest = -160.0f / inv_t.octaves_hi;
  const __m512 deep = _mm512_set1_ps(std::isfinite(deepest) ? deepest : -kInf);
  const auto p_fast = [&](__m512 v, __m512 neg_r) __attribute__((always_inline)) {
    const __m512 y = _mm512_fmadd_ps(v, octaves, neg_r);
    const __m512 t =
        _mm512_fmadd_round_ps(y, one, shift, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 f =
        _mm512_maskz_reduce_ps(0xFFFF, y, (5 << 4) | _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_fmadd_ps(f, _mm512_fmadd_ps(f, e2, e1), e0);
    const __m512 table = _mm512_permutex2var_ps(tlo, _mm512_castps_si512(t), thi);
    return _mm512_maskz_scalef_ps(0xFFFF, _mm512_mul_ps(table, r), y);
  };
  const auto p_exact = [&](__m512 v, __m512 neg_ref) __attribute__((always_inline)) {
    const __m512 d = max16(deep, _mm512_add_ps(v, neg_ref));
    const __m512 t = _mm512_fmadd_ps(d, octaves, shift);
    const __m512 nn = _mm512_add_ps(t, neg_shift);
    const __m512 f = _mm512_fmsub_ps(d, octaves, nn);
    const __m512 q = _mm512_fmadd_ps(f, c1, c0);
    const __m512 table = _mm512_permutex2var_ps(tlo, _mm512_castps_si512(t), thi);
    return _mm512_maskz_scalef_ps(0xFFFF, _mm512_fmadd_ps(table, _mm512_mul_ps(f, q), table), nn);
  };
  const int chunks = (n + kChunk - 1) / kChunk;
  scan_span(x, std::min(n, kChunk));
  const bool far0 = end_chunk(0);
  float ref = s.chunk_max[0];
  bool odd = far0 || !(std::fabs(ref) < far_limit);
  int top_block = 0;
  for (int c = 0; c < chunks; ++c) {
    const float* xe = x + static_cast<long>(c) * kChunk;
    const int ne = std::min(kChunk, n - c * kChunk);
    const int ns = c + 1 < chunks ? std::min(kChunk, n - (c + 1) * kChunk) : 0;
    const float* xs = ns > 0 ? xe + kChunk : xe;  // no pointer past the row's end
    float chunk = 0;
    double frame = 0;
    if (ref == -kInf) {  // every logit so far is -inf (or NaN): p 0
      out.nan = out.nan || holds_nan(xe, ne);
      scan_span(xs, ns);
    } else {
      __m512 acc = _mm512_setzero_ps();
      const int both = std::min(ne, ns) / kP * kP;
      int i = 0;
      // Chunk c's p summed by p_of while chunk c + 1 is scanned; a tail's lanes past the row take
      // ref (finite) and are then left out of the sum.
      const auto sum_with = [&](auto p_of) __attribute__((always_inline)) {
        for (; i < both; i += kP) {
          scan(_mm512_loadu_ps(xs + i));
          acc = _mm512_add_ps(p_of(_mm512_loadu_ps(xe + i)), acc);
        }
        scan_span(xs + both, ns - both);
        for (; i < ne; i += kP) {
          const __mmask16 lanes = lanes_to(ne - i);
          const __m512 p = p_of(_mm512_mask_loadu_ps(_mm512_set1_ps(ref), lanes, xe + i));
          acc = _mm512_add_ps(_mm512_maskz_mov_ps(lanes, p), acc);
        }
      };
      // Exact also where the chunk holds ref itself: p of ref is then exactly 1, and so is every
      // p of best in S (best's chunks hold the largest logit so far), as on the device, where tied
      // largest logits can put top_p S right on a boundary (top_p 0.5 over two of them).
      if (odd || s.chunk_max[static_cast<std::size_t>(c)] == ref) {
        const __m512 neg_ref = _mm512_set1_ps(-ref);
        sum_with([&](__m512 v) __attribute__((always_inline)) { return p_exact(v, neg_ref); });
        frame = static_cast<double>(ref) * inv_t.octaves_hi;
      } else {
        const float r = ref * inv_t.octaves_hi;
        const __m512 neg_r = _mm512_set1_ps(-r);
        sum_with([&](__m512 v) __attribute__((always_inline)) { return p_fast(v, neg_r); });
        frame = r;
      }
      chunk = Eigen::internal::predux(acc);
    }
    s.chunks[static_cast<std::size_t>(c)] = chunk;
    s.ref_octaves[static_cast<std::size_t>(c)] = frame;
    if (ns > 0) {
      const bool is_far = end_chunk(c + 1);
      const float next_max = s.chunk_max[static_cast<std::size_t>(c) + 1];
      if (next_max > ref) {
        ref = next_max;
        top_block = c + 1;
      }
      odd = is_far || !(std::fabs(ref) < far_limit);
    }
  }
  out.best = lanes_max(best);
  out.low = lanes_min(low);
  out.top_block = top_block;
}

/// second of the rule (step 1) for a row without NaN whose largest logit `best` lies first in
/// chunk `top`: the largest of the other chunks' largest logits and of the top chunk's logits but
/// best's first.
float second_of(const float* x, int n, float best, int top, const std::vector<float>& chunk_max) {
  float second = -kInf;
  for (int c = 0; c < static_cast<int>(chunk_max.size()); ++c)
    if (c != top) second = std::max(second, chunk_max[static_cast<std::size_t>(c)]);
  const float* xt = x + static_cast<long>(top) * kChunk;
  const int len = std::min(kChunk, n - top * kChunk);
  const __m512 ninf = _mm512_set1_ps(-kInf), vbest = _mm512_set1_ps(best);
  bool seen = false;  // best's first lane left out
  __m512 m = ninf;
  for (int i = 0; i < len; i += kP) {
    const __mmask16 lanes = lanes_to(len - i);
    const __m512 v = _mm512_mask_loadu_ps(ninf, lanes, xt + i);
    __mmask16 keep = 0xFFFF;
    if (!seen) {
      const auto at = static_cast<unsigned>(_mm512_mask_cmp_ps_mask(lanes, v, vbest, _CMP_EQ_OQ));
      if (at != 0) {
        keep = static_cast<__mmask16>(~(at & -at));
        seen = true;
      }
    }
    m = _mm512_mask_max_ps(m, keep, v, m);
  }
  return std::max(second, lanes_max(m));
}

/// The tokens whose logit is at least `floor`, packed into cx and ci (logits and indices, in index
/// order; each needs room for kP entries more than are kept); returns how many. Four vectors are
/// compared before one branch: few of a row's vectors hold a candidate.
int keep_from(const float* x, int n, int first, float floor, float* cx, int* ci) {
  const __m512 f = _mm512_set1_ps(floor);
  int at = 0;
  const auto keep = [&](__mmask16 lanes, int i) __attribute__((always_inline)) {
    pack_lanes(lanes, _mm512_maskz_loadu_ps(lanes, x + i), first + i, cx, ci, at);
  };
  int i = 0;
  for (; i + 4 * kP <= n; i += 4 * kP) {
    std::array<__mmask16, 4> m;
    for (int k = 0; k < 4; ++k)
      m[k] = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i + k * kP), f, _CMP_GE_OQ);
    if ((m[0] | m[1] | m[2] | m[3]) == 0) continue;
    for (int k = 0; k < 4; ++k)
      if (m[k] != 0) keep(m[k], i + k * kP);
  }
  for (; i < n; i += kP) {
    const __mmask16 lanes = lanes_to(n - i);
    const __mmask16 m =
        _mm512_mask_cmp_ps_mask(lanes, _mm512_maskz_loadu_ps(lanes, x + i), f, _CMP_GE_OQ);
    if (m != 0) keep(m, i);
  }
  return at;
}

/// A bound below tau from the largest logits of the chunks' lanes, or 0. Each of a chunk's 16
/// lanes holds the tokens of one index mod 16, so the lanes' largest logits are distinct tokens, as
/// many as 16 a chunk: b, where their p of at least b add up to top_p S and 1e-4 S more (a margin
/// far above the rounding of S), bounds tau from below, since those tokens alone hold more than
/// top_p S. b is found by bisection over its float's bits (every p is in [0, 1]) to within 1/8 of
/// an octave of the largest such: 10 steps. Where a few tokens hold most of the mass, as a model's
/// logits mostly leave them, it lies far above the bound from the count (nucleus_per_token), and
/// fewer chunks reach the candidates' floor.
double lanes_bound(const SamplingJob& job, float best, double sum, float floor, Scratch& s) {
  const double goal = (static_cast<double>(job.top_p) + 1e-4) * sum;
  // Only the lanes that reach the floor of the count's bound: b matters only above that bound, and
  // a lane of p at least b reaches it. A model's row leaves few of them.
  const int lanes = static_cast<int>(s.lane_max.size());  // whole vectors: 16 a chunk
  s.lane_p.resize(static_cast<std::size_t>(lanes) + kP);
  int m = 0;
  const __m512 vf = _mm512_set1_ps(floor);
  for (int i = 0; i < lanes; i += kP) {
    const __m512 v = _mm512_loadu_ps(s.lane_max.data() + i);
    const __mmask16 keep = _mm512_cmp_ps_mask(v, vf, _CMP_GE_OQ);
    _mm512_storeu_ps(s.lane_p.data() + m, _mm512_maskz_compress_ps(keep, v));
    m += std::popcount(static_cast<unsigned>(keep));
  }
  // The mass of those p at or above b is summed in float, 16 lanes of at most 2^10 adds each and 4
  // to fold them: within 6.4e-5 of it, below the margin, for at most 2^14 of them (a vocabulary of
  // 2M); past that, no bound.
  if (m > (1 << 14)) return 0;
  rule_p(s.lane_p.data(), s.lane_p.data(), m, best, job.inv_temperature);
  for (int i = m; i % kP != 0; ++i) s.lane_p[static_cast<std::size_t>(i)] = 0.0f;
  const auto held = [&](float b) {
    const __m512 vb = _mm512_set1_ps(b);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < m; i += kP) {  // the last vector's lanes past m hold 0
      const __m512 v = _mm512_loadu_ps(s.lane_p.data() + i);
      acc = _mm512_mask_add_ps(acc, _mm512_cmp_ps_mask(v, vb, _CMP_GE_OQ), acc, v);
    }
    return static_cast<double>(Eigen::internal::predux(acc));
  };
  if (!(held(0.0f) >= goal)) return 0;  // a flat row's: no few tokens stand out
  std::uint32_t lo = 0, hi = std::bit_cast<std::uint32_t>(1.0f) + 1;  // held(lo) >= goal > held(hi)
  while (hi - lo > (1u << 20)) {  // 2^20 of a float's bits: 1/8 of an octave
    const std::uint32_t mid = lo + (hi - lo) / 2;
    (held(std::bit_cast<float>(mid)) >= goal ? lo : hi) = mid;
  }
  return std::bit_cast<float>(lo);
}

/// A draw in one pass over its row (one_pass), then what the rule asks in best's frame: best,
/// second and max |x| (from the greedy scan where a zero's sign or a NaN asks for its rule); each
/// chunk's sum scaled from its frame to best's; for top-p < 1, the candidates picked by their
/// logits once S is known, and their p computed from best as the two-pass draw computes them.
/// inv_t is product_exp(job.inv_temperature), which must have split.
SampledToken draw_one_pass(const float* x, int n, const SamplingJob& job,
                           const simd::ProductExp& inv_t, Scratch& s) {
  const int chunks = (n + kChunk - 1) / kChunk;
  s.chunks.resize(static_cast<std::size_t>(chunks));
  s.ref_octaves.resize(static_cast<std::size_t>(chunks));
  s.chunk_max.resize(static_cast<std::size_t>(chunks));
  s.lane_max.resize(static_cast<std::size_t>(chunks) * kScanLanes);
  OnePass pass;
  one_pass(x, n, inv_t, s, pass);
  bool sums_hold = true;  // no chunk's sum is NaN
  for (const float chunk : s.chunks) sums_hold = sums_hold && chunk == chunk;
  SampledToken t{0, pass.best, -kInf, std::fabs(std::max(pass.best, -pass.low))};
  // Rows the greedy scan settles: a NaN (seen, or a sum's), an infinity, a zero's sign (best's is
  // its first zero's, second's as the scan's lanes leave it).
  bool scan = pass.nan || !sums_hold || !std::isfinite(pass.best) || pass.best == 0.0f;
  if (!scan) {
    t.second = second_of(x, n, pass.best, pass.top_block, s.chunk_max);
    scan = t.second == 0.0f;
  }
  if (scan) {
    t = scan_row(x, n, false);
    if (t.token == SampledToken::kNaNLogit) return t;
    if (t.best == kInf || t.best == -kInf) {
      t.token = t.best == kInf ? SampledToken::kInfLogit : SampledToken::kNoTokenAllowed;
      return t;
    }
    if (!sums_hold) {  // a NaN sum from a row without NaN or infinity: not expected; two passes
      t.token = draw(x, n, job, t, s);
      return t;
    }
  }
  // Each chunk's sum in best's frame. A chunk whose largest p is 0 by the rule (x - best below
  // a_min, where exp_product's mask makes it 0) holds no token a draw can take, but its sum, of p
  // the pass left unmasked, need not be 0: it is set to 0, or a draw whose number falls there (u 0,
  // say) would find no token.
  const double best_octaves = static_cast<double>(t.best) * inv_t.octaves_hi;
  double sum = 0;
  for (int c = 0; c < chunks; ++c) {
    float& chunk = s.chunks[static_cast<std::size_t>(c)];
    if (!(s.chunk_max[static_cast<std::size_t>(c)] - t.best >= inv_t.a_min))
      chunk = 0.0f;
    else if (chunk != 0.0f)
      chunk = static_cast<float>(
          chunk * std::exp2(s.ref_octaves[static_cast<std::size_t>(c)] - best_octaves));
    sum += chunk;
  }
  if (job.top_p >= 1.0f) {
    t.token = walk_full(x, n, job, t.best, s);
    return t;
  }
  // The candidates: p = exp((x - best) / T) is at least a bound where x - best is at least T
  // ln(bound). The floor goes down by more than the rounding of x - best (half a unit in its last
  // place, 2^-24 of it) and of p (2 ulp) can lift a token past it.
  const auto floor_of = [&](double bound) {
    const double below = std::log(bound) / static_cast<double>(job.inv_temperature);  // <= 0
    const double floor = static_cast<double>(t.best) + below -
                         1e-6 * (std::fabs(t.best) - below + 1.0 / job.inv_temperature);
    const float lowest = std::numeric_limits<float>::lowest();  // -inf logits are never in
    return floor > lowest ? std::max(std::nextafter(static_cast<float>(floor), -kInf), lowest)
                          : lowest;
  };
  const double count = std::min(1.0, nucleus_per_token(job, n) * sum);
  const double lanes = lanes_bound(job, t.best, sum, floor_of(count), s);
  const float f = floor_of(std::max(count, lanes));
  s.cand_p.resize(static_cast<std::size_t>(n) + kP);
  s.cand_i.resize(static_cast<std::size_t>(n) + kP);
  int kept = 0;  // the chunks whose largest logit is below the floor hold none
  for (int c = 0; c < chunks; ++c)
    if (s.chunk_max[static_cast<std::size_t>(c)] >= f)
      kept += keep_from(x + static_cast<long>(c) * kChunk, std::min(kChunk, n - c * kChunk),
                        c * kChunk, f, s.cand_p.data() + kept, s.cand_i.data() + kept);
  rule_p(s.cand_p.data(), s.cand_p.data(), kept, t.best, job.inv_temperature);
  t.token = draw_nucleus_from(x, n, job, t.best, sum, kept, s);
  return t;
}
#endif

}  // namespace

void rule_p(float* p, const float* x, int n, float best, float inv_temperature) {
  KeepAll all{p};  // the draws' own pass, every p stored (each read before it is written)
  sum_p(x, n, best, simd::product_exp(inv_temperature), all);
}

void sample_rows(SampledToken* out, const float* logits, int rows, int vocab,
                 const SamplingJob* jobs, int n_jobs) {
  if (vocab < 1) throw InputError("sample_rows: a row of logits needs at least one entry");
  for (int j = 0; j < n_jobs && jobs != nullptr; ++j)
    if (jobs[j].row < 0 || jobs[j].row >= rows)
      throw InputError(fmt::format("sample_rows: job {} reads row {} of {}", j, jobs[j].row, rows));
  if (jobs == nullptr && n_jobs > rows)
    throw InputError(fmt::format("sample_rows: {} greedy jobs over {} rows", n_jobs, rows));
#pragma omp parallel for schedule(dynamic, 1) if (n_jobs > 1)
  for (int j = 0; j < n_jobs; ++j) {
    thread_local Scratch scratch;
    const SamplingJob job = jobs != nullptr ? jobs[j] : SamplingJob{j, 0.0f, 1.0f, 0.0f};
    const float* x = logits + static_cast<long>(job.row) * vocab;
#if defined(__AVX512F__)
    if (job.inv_temperature > 0.0f) {
      const simd::ProductExp inv_t = simd::product_exp(job.inv_temperature);
      if (inv_t.split) {
        out[j] = draw_one_pass(x, vocab, job, inv_t, scratch);
        continue;
      }
    }
#endif
    SampledToken t = scan_row(x, vocab, !(job.inv_temperature > 0.0f));
    if (t.token != SampledToken::kNaNLogit && job.inv_temperature > 0.0f)
      t.token = draw(x, vocab, job, t, scratch);
    out[j] = t;
  }
}

}  // namespace kvheap::cpu
