// The next token of each logit row: greedy, or a draw with temperature and top-p, together with
// the row's top-2 logits, in 16 bytes a row. A GPU runs it where the logits are, so that only
// those 16 bytes cross to the host, whatever the vocabulary.
//
// One rule for both twins (sample_cpu.cpp, sample.cu). Per job, over row `row` of the logits:
//
//   1. best, second, max_abs: the largest logit (the lowest index among equals), the largest of
//      the others, and the largest |logit|. A NaN anywhere makes the token kNaNLogit.
//   2. temperature 0: the token is best's index.
//   3. otherwise p_i = exp((logit_i - best) * inv_temperature), or 0 where that is below the
//      smallest normal float (p of best is 1; the host computes inv_temperature = 1 / temperature
//      once, held to the largest float; a +inf logit is kInfLogit, and a row of -inf only
//      kNoTokenAllowed), and S = sum of p.
//   4. top_p < 1: sort the tokens by p, largest first, equal p by index. The nucleus is the
//      shortest head of that order whose mass exceeds top_p * S. It is found without sorting:
//      tau, the p of its last token, is the largest p whose "mass of p >= tau" exceeds top_p * S;
//      every token with p > tau is in, and of those with p == tau the first k by index, k the
//      fewest that carry the mass over. top_p 1: every token is in.
//   5. the draw: walk the nucleus by index, adding up p; the token is the first at which the sum
//      exceeds u * (the nucleus' mass), u being the job's uniform number in [0, 1) (the host draws
//      it from the request's seeded generator). Rounding can leave the sum short of it: then the
//      last token of the nucleus that can occur (p > 0).
//
// The twins sum in different orders, and p differs by rounding (with AVX-512 the host does not
// round (logit - best) * inv_temperature before the exponential; the device does; and the host's
// S, where it is known in one pass, adds p taken against the largest logit of the blocks up to
// its own, by a faster exponential within 3e-7 of the rule's, each block's sum then scaled to
// best's), so they agree except
// where u * mass falls within rounding of a boundary between two tokens, or a sum within rounding
// of top_p * S: near ties of the sampled distribution, which tests count and report.
#pragma once

#include <cstdint>
#include <limits>

#include "kernels/cuda_stream.hpp"
#include "kernels/host_device.hpp"

namespace kvheap {

/// \brief One token to choose: which logit row, and how.
struct SamplingJob {
  int row = 0;                ///< logit row of the pass, 0-based
  float inv_temperature = 0;  ///< inverse_temperature(temperature); 0: greedy
  float top_p = 1;            ///< nucleus mass in (0, 1]
  float u = 0;                ///< uniform number in [0, 1) for the draw (unused when greedy)
};

/// \brief 1 / temperature, held to the largest float, or 0 for temperature 0 (greedy). The host
/// divides once per job: neither twin then divides (the device's division would cost the kernel
/// a helper call), and a temperature so small that its inverse overflows still gives p 0 to all
/// but the largest logits, where an infinite inverse would give (best - best) x inf = NaN.
inline float inverse_temperature(float temperature) {
  if (!(temperature > 0.0f)) return 0.0f;
  const float inv = 1.0f / temperature;
  return inv < std::numeric_limits<float>::max() ? inv : std::numeric_limits<float>::max();
}

/// \brief The job that draws from logit row `row` with `temperature` (above 0) and `top_p`, at the
/// uniform number `u`.
inline SamplingJob draw_job(int row, float temperature, float top_p, float u) {
  return {row, inverse_temperature(temperature), top_p, u};
}

/// \brief What a job chose, and its row's top two logits: 16 bytes, all that crosses to the host.
struct SampledToken {
  int token = 0;      ///< the token id, or one of the negative codes below
  float best = 0;     ///< the largest logit
  float second = 0;   ///< the largest logit but one (best's index excluded; may equal best)
  float max_abs = 0;  ///< the largest |logit|

  static constexpr int kNaNLogit = -1;        ///< a logit of the row is NaN
  static constexpr int kInfLogit = -2;        ///< a draw met a +inf logit
  static constexpr int kNoTokenAllowed = -3;  ///< a draw met a row of -inf only
};
static_assert(sizeof(SampledToken) == 16, "16 bytes a row cross to the host");

/// \brief (best - second) / max_abs: how far greedy decoding is from picking another token. 0 for
/// a row of zeros and where infinities leave no number (two +inf, every logit -inf); +inf where
/// no other token can be picked at all (the others -inf, or a vocabulary of one).
inline float top2_gap(const SampledToken& t) {
  const float gap = t.max_abs > 0 ? (t.best - t.second) / t.max_abs : 0.0f;
  return gap == gap ? gap : 0.0f;
}

/// \brief k of the rule (step 4): the fewest of the `ties` tokens at tau that carry the mass above
/// tau past `target`; at least 1 and at most `ties`. Both twins call this one function: a float
/// estimate, then exact steps on mass_above + k x tau in double, which round alike on host and
/// device (a double division would cost the kernel a helper call, and registers, on sm_80).
KVHEAP_HD int fewest_ties(double target, double mass_above, float tau, int ties) {
  const double excess = target - mass_above;
#if defined(__CUDA_ARCH__)
  const float quotient = __fdividef(static_cast<float>(excess), tau);  // an estimate only
#else
  const float quotient = static_cast<float>(excess) / tau;
#endif
  int k = excess > 0 && quotient < 2e9f ? static_cast<int>(quotient) + 1 : (excess > 0 ? ties : 1);
  k = k < 1 ? 1 : (k > ties ? ties : k);
  while (k > 1 && mass_above + static_cast<double>(k - 1) * tau > target) --k;
  while (k < ties && !(mass_above + static_cast<double>(k) * tau > target)) ++k;
  return k;
}

}  // namespace kvheap

namespace kvheap::cpu {

/// \brief p[i] = the rule's p (step 3) of x[i] <= best (or -inf), as sample_rows computes it:
/// exp((x[i] - best) * inv_temperature) within 2 ulp of exp of the exact product with AVX-512
/// (cpu::simd::kExactProduct), else of exp of the product rounded to a float; 0 where that is
/// below the smallest normal float. p may be x.
void rule_p(float* p, const float* x, int n, float best, float inv_temperature);

/// \brief out[j] = the token of jobs[j] (the rule above), on the host. `jobs` null: job j is
/// greedy on row j. Throws InputError when vocab < 1 or a job's row is outside [0, rows).
/// \param out    [n_jobs] written
/// \param logits [rows, vocab]
void sample_rows(SampledToken* out, const float* logits, int rows, int vocab,
                 const SamplingJob* jobs, int n_jobs);

}  // namespace kvheap::cpu

namespace kvheap::cuda {

/// \brief Floats of scratch sample_rows needs for `n_draws` jobs that draw: one row of p each.
long sample_scratch_floats(int n_draws, int vocab);

/// \brief CUDA twin of cpu::sample_rows on device memory (sample.cu): every job's row scanned
/// once (one block a job), then, for the jobs listed in `draws`, the draw (one block each). A
/// draw reads its row about 35 times, from L2 where the row fits, since the nucleus is found by
/// bisection over p (30 steps).
/// \param out     [n_jobs] written
/// \param logits  [rows, vocab]
/// \param jobs    [n_jobs], or null: job j is greedy on row j
/// \param draws   [n_draws] the indices of the jobs whose inv_temperature is above 0 (the caller
///                knows them: it made the jobs); null when n_draws is 0
/// \param scratch [sample_scratch_floats(n_draws, vocab)]; null when n_draws is 0
void sample_rows(SampledToken* out, const float* logits, int vocab, const SamplingJob* jobs,
                 int n_jobs, const int* draws, int n_draws, float* scratch,
                 StreamHandle stream = nullptr);

}  // namespace kvheap::cuda
