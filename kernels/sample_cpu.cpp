// The next token of each logit row on the host (the twin of sample.cu), the rule in sample.hpp.
//
// A greedy row costs one pass over its logits, in 16 lanes the compiler vectorises. A draw adds
// one vectorised pass that sums p (Eigen's exp, never stored). A top-p 1 draw then walks the one
// chunk its number falls in. A top-p < 1 draw first narrows the nucleus to the tokens that can be
// in it at all: a token of p below (1 - top_p) / (vocab - 1) * S never is, since even vocab - 1
// tokens of that size hold less than 1 - top_p of the mass. Those candidates are found by their
// logits, a span at a time; their mass binned by p finds tau in linear time, so the vocabulary is
// never sorted. Rows run in parallel on the OpenMP threads.
#include <Eigen/Core>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/error.hpp"
#include "kernels/sample.hpp"

namespace kvheap::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMaxFloat = std::numeric_limits<float>::max();

/// best, second and max_abs of a row, or token kNaNLogit: one pass in kLanes independent lanes
/// (each keeps its own best, index, second and max |x|), merged at the end. A lane takes a new
/// best only on a strictly larger value, and the merge prefers the lower index among equal
/// values, so ties go to the lowest index.
SampledToken scan_row(const float* x, int n) {
  constexpr int kLanes = 16;
  alignas(64) float best[kLanes], second[kLanes], max_abs[kLanes];
  alignas(64) int index[kLanes], nan[kLanes];
  for (int k = 0; k < kLanes; ++k) {
    best[k] = second[k] = -kInf;
    max_abs[k] = 0;
    index[k] = std::numeric_limits<int>::max();
    nan[k] = 0;
  }
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC ivdep
    for (int k = 0; k < kLanes; ++k) {
      const float v = x[i + k];
      nan[k] |= static_cast<int>(v != v);
      second[k] = std::max(second[k], std::min(best[k], v));
      const bool larger = v > best[k] || (v == best[k] && i + k < index[k]);
      index[k] = larger ? i + k : index[k];
      best[k] = larger ? v : best[k];
      max_abs[k] = std::max(max_abs[k], std::fabs(v));
    }
  }
  SampledToken t{std::numeric_limits<int>::max(), -kInf, -kInf, 0};
  bool bad = false;
  const auto take = [&t](float v, int at) {
    if (v > t.best || (v == t.best && at < t.token)) {
      t.second = std::max(t.second, t.best);
      t.best = v;
      t.token = at;
    } else {
      t.second = std::max(t.second, v);
    }
  };
  for (int k = 0; k < kLanes; ++k) {
    bad = bad || nan[k] != 0;
    t.max_abs = std::max(t.max_abs, max_abs[k]);
    t.second = std::max(t.second, second[k]);
    take(best[k], index[k]);
  }
  for (; i < n; ++i) {
    bad = bad || std::isnan(x[i]);
    t.max_abs = std::max(t.max_abs, std::fabs(x[i]));
    take(x[i], i);
  }
  if (bad) t.token = SampledToken::kNaNLogit;
  return t;
}

/// What the nucleus' cut is: tau, the largest p whose "mass of p >= tau" exceeds the target,
/// with the mass of p > tau and the count of p == tau.
struct Threshold {
  float tau = 0;
  double mass_above = 0;  // of p > tau
  long ties = 0;          // of p == tau
};

/// The candidates of a draw: their logits, p and indices, in index order. The buffers only grow,
/// so a draw allocates nothing once they hold a vocabulary.
struct Candidates {
  std::vector<float> x, p;
  std::vector<int> id;
  std::vector<int> bucket;      // each one's bucket of -ln p (below)
  std::vector<double> mass;     // [kBuckets] the mass of each bucket
  std::vector<float> crossing;  // the p of the bucket where the mass crosses the target
  Eigen::Index count = 0;       // candidates held

  void reserve(int n) {
    const auto size = static_cast<std::size_t>(n);
    if (x.size() >= size) return;
    x.resize(size);
    p.resize(size);
    id.resize(size);
    bucket.resize(size);
  }
  [[nodiscard]] Eigen::Map<const Eigen::ArrayXf> xs() const { return {x.data(), count}; }
  [[nodiscard]] Eigen::Map<const Eigen::ArrayXf> ps() const { return {p.data(), count}; }
};

/// tau among the candidates, whose p all lie in [bound, 1], in linear time: their mass binned by
/// -ln p = (best - x) / T in kBuckets even buckets over [0, -ln bound]; the buckets summed from
/// the top to the one where the mass crosses `target`; that bucket's few p sorted and summed on
/// to the crossing. Bucket order follows p's order (exp rises with x), so every token of an
/// earlier bucket has a p at least tau's. The mass above tau and the ties at it are then counted
/// exactly, since rounding may give two logits of neighbouring buckets one p.
Threshold select_threshold(Candidates& c, double target, float best, float inv_t, double bound) {
  constexpr int kBuckets = 1024;
  const double per_nat = kBuckets / std::max(-std::log(bound), 1e-6);
  c.mass.assign(kBuckets, 0.0);
  // The buckets, vectorised; then their masses, in index order.
  Eigen::Map<Eigen::ArrayXi>(c.bucket.data(), c.count) =
      ((best - c.xs()) * std::min(static_cast<float>(inv_t * per_nat), kMaxFloat))
          .min(static_cast<float>(kBuckets - 1))
          .cast<int>();
  for (Eigen::Index i = 0; i < c.count; ++i)
    c.mass[static_cast<std::size_t>(c.bucket[i])] += c.p[i];
  double before = 0;
  int cross = kBuckets - 1;
  for (int b = 0; b < kBuckets; ++b) {
    if (before + c.mass[static_cast<std::size_t>(b)] > target) {
      cross = b;
      break;
    }
    before += c.mass[static_cast<std::size_t>(b)];
  }
  c.crossing.clear();
  for (Eigen::Index i = 0; i < c.count; ++i)
    if (c.bucket[i] == cross) c.crossing.push_back(c.p[i]);
  std::sort(c.crossing.begin(), c.crossing.end(), std::greater<>());
  // The crossing token; only rounding leaves the sum short of the target: the smallest p then.
  float tau = c.crossing.empty() ? (c.count > 0 ? c.ps().minCoeff() : 1.0f) : c.crossing.back();
  for (const float p : c.crossing) {
    before += p;
    if (before > target) {
      tau = p;
      break;
    }
  }
  return {tau, static_cast<double>((c.ps() > tau).select(c.ps(), 0.0f).sum()),
          static_cast<long>((c.ps() == tau).count())};
}

/// Per-thread scratch: a chunk's p, the chunks' sums, and the candidates.
struct Scratch {
  std::vector<float> p;
  std::vector<float> chunks;
  Candidates candidates;
};

constexpr int kChunk = 4096;  // tokens a top-p 1 draw sums at a time

/// A top-p 1 draw: every token is in. The row's p are summed a chunk at a time without being
/// stored (Eigen evaluates exp and sum in one vectorised pass); only the chunk the draw falls
/// in is computed again and walked.
int draw_full(const float* x, int n, const SamplingJob& job, float best, Scratch& s) {
  const float inv_t = job.inv_temperature;
  const auto p_of = [&](int c, int len) {
    return ((Eigen::Map<const Eigen::ArrayXf>(x + c, len) - best) * inv_t).exp();
  };
  const int chunks = (n + kChunk - 1) / kChunk;
  s.chunks.resize(static_cast<std::size_t>(chunks));
  double sum = 0;
  for (int c = 0; c < chunks; ++c) {
    const int len = std::min(kChunk, n - c * kChunk);
    s.chunks[static_cast<std::size_t>(c)] = p_of(c * kChunk, len).sum();
    sum += s.chunks[static_cast<std::size_t>(c)];
  }
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
  Eigen::Map<Eigen::ArrayXf>(s.p.data(), len) = p_of(c * kChunk, len);
  int token = -1;
  for (int i = 0; i < len; ++i) {
    if (s.p[static_cast<std::size_t>(i)] <= 0.0f) continue;
    cdf += s.p[static_cast<std::size_t>(i)];
    token = c * kChunk + i;
    if (walk >= 0 && goal < cdf) break;
  }
  return token;
}

/// A top-p < 1 draw. S in one vectorised pass; then the candidates, the tokens whose logit is
/// at least best + T ln(bound); then tau among them, and the walk over those in the nucleus.
int draw_nucleus(const float* x, int n, const SamplingJob& job, float best, Scratch& s) {
  const float inv_t = job.inv_temperature;
  const Eigen::Map<const Eigen::ArrayXf> logits(x, n);
  const double sum = ((logits - best) * inv_t).exp().sum();
  const double need = static_cast<double>(job.top_p) * sum;
  // Half the bound, against the rounding of the sum; the largest token (p = 1) always. In logits:
  // p >= bound when logit >= best + T ln(bound), less a little for exp's own rounding.
  const double bound = std::min(1.0, 0.5 * (1.0 - job.top_p) / std::max(n - 1, 1) * sum);
  const auto cut = static_cast<float>(best + (std::log(bound) - 1e-3) / inv_t);
  // Candidates, in index order. A span of kSpan logits whose largest is below the cut holds none
  // (Eigen's vectorised max decides it); in the others, a branch-free copy keeps those at or
  // above it.
  Candidates& c = s.candidates;
  constexpr int kSpan = 256;
  c.reserve(n);
  c.count = 0;
  for (int at = 0; at < n; at += kSpan) {
    const int len = std::min(kSpan, n - at);
    if (Eigen::Map<const Eigen::ArrayXf>(x + at, len).maxCoeff() < cut) continue;
    for (int i = at; i < at + len; ++i) {
      c.x[static_cast<std::size_t>(c.count)] = x[i];
      c.id[static_cast<std::size_t>(c.count)] = i;
      c.count += x[i] >= cut ? 1 : 0;
    }
  }
  Eigen::Map<Eigen::ArrayXf>(c.p.data(), c.count) = ((c.xs() - best) * inv_t).exp();
  const Threshold th = select_threshold(c, need, best, inv_t, bound);
  // Of the tokens at tau, the first k by index: the fewest that carry the mass past top_p * S.
  const long k = fewest_ties(need, th.mass_above, th.tau,
                             static_cast<int>(std::min<long>(std::max(th.ties, 1L), 1L << 30)));
  const double goal =
      static_cast<double>(job.u) * (th.mass_above + static_cast<double>(k) * th.tau);
  // The walk, in index order. When every tie is in, the nucleus is p >= tau, and whole spans of
  // candidates are skipped by their (vectorised) masked sums; else one by one, counting ties.
  double cdf = 0;
  long tie_rank = 0;
  int last = -1;
  Eigen::Index from = 0;
  if (k == th.ties) {
    Eigen::Index last_span = -1;
    for (; from < c.count; from += kSpan) {
      const Eigen::Index len = std::min<Eigen::Index>(kSpan, c.count - from);
      const auto span = c.ps().segment(from, len);
      const double mass = (span >= th.tau).select(span, 0.0f).sum();
      if (mass <= 0) continue;
      if (goal < cdf + mass) break;
      cdf += mass;
      last_span = from;
    }
    if (from >= c.count) from = std::max<Eigen::Index>(last_span, 0);  // rounding: the last span
  }
  for (Eigen::Index j = from; j < c.count; ++j) {
    const float pc = c.p[static_cast<std::size_t>(j)];
    if (pc < th.tau || (pc == th.tau && tie_rank++ >= k)) continue;
    cdf += pc;
    last = c.id[static_cast<std::size_t>(j)];
    if (goal < cdf) return last;
  }
  return last;
}

/// The draw of `job` on a row whose scan gave `t` (no NaN in it).
int draw(const float* x, int n, const SamplingJob& job, const SampledToken& t, Scratch& s) {
  if (t.best == kInf) return SampledToken::kInfLogit;
  if (t.best == -kInf) return SampledToken::kNoTokenAllowed;
  return job.top_p >= 1.0f ? draw_full(x, n, job, t.best, s) : draw_nucleus(x, n, job, t.best, s);
}

}  // namespace

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
    SampledToken t = scan_row(x, vocab);
    if (t.token != SampledToken::kNaNLogit && job.inv_temperature > 0.0f)
      t.token = draw(x, vocab, job, t, scratch);
    out[j] = t;
  }
}

}  // namespace kvheap::cpu
