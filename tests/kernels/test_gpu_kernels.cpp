// The forward pass's CUDA kernels against their CPU twins, over awkward sizes (rows 1, 3, 17;
// widths that are not multiples of a warp or of 4): embedding gather, RMSNorm, Qwen3's per-head
// q/k RMSNorm, RoPE, SwiGLU and residual add, fp16/bf16 casts and bias add, greedy argmax.
//
// Exact where the arithmetic is the same operation (gathers, casts, adds, argmax); 1e-6 relative
// (max error / max magnitude) where only rounding can differ. In the simulator build the kernels
// run on the CPU; in a real build without a GPU every test skips with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "base/half.hpp"
#include "common/measure/cuda/l2_flush.hpp"
#include "common/model/rope_freqs.hpp"
#include "common/serving/sampler.hpp"
#include "kernels/sample.hpp"
#include "kernels/cast.hpp"
#include "kernels/embedding.hpp"
#include "kernels/matmul.hpp"
#include "kernels/qk_norm.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/swiglu.hpp"
#include "tests/support/device_test_support.hpp"

namespace kvheap {
namespace {

using test::rel_close;
using test::to_device;

std::vector<float> random_floats(std::size_t n, unsigned seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Bit patterns, so that exact comparisons also hold for NaN rows.
std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = std::bit_cast<std::uint32_t>(v[i]);
  return b;
}

constexpr int kRows[] = {1, 3, 17};
constexpr int kDims[] = {8, 64, 172, 768};

TEST(GpuKernels, EmbeddingGathersExactlyFromEveryTableDtype) {
  KVHEAP_REQUIRE_DEVICE();
  constexpr int kVocab = 37;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (int dim : kDims) {
      const std::vector<float> table = random_floats(static_cast<std::size_t>(kVocab) * dim, dim);
      // The table as the kernel stores it: fp32, or fp16/bf16 bit patterns.
      std::vector<std::uint16_t> narrow(table.size());
      for (std::size_t i = 0; i < table.size(); ++i)
        narrow[i] = dtype == DType::F16 ? float_to_fp16(table[i]) : float_to_bf16(table[i]);
      const void* host_table = dtype == DType::F32 ? static_cast<const void*>(table.data())
                                                   : static_cast<const void*>(narrow.data());
      auto d_table_f = to_device(table);
      auto d_table_h = to_device(narrow);
      const void* dev_table = dtype == DType::F32 ? static_cast<const void*>(d_table_f.data())
                                                  : static_cast<const void*>(d_table_h.data());
      for (int n : kRows) {
        std::vector<int> ids(n);
        for (int r = 0; r < n; ++r) ids[r] = (r * 7 + dim) % kVocab;
        if (n > 1) ids[n - 1] = kVocab - 1;  // the last table row
        std::vector<float> want(static_cast<std::size_t>(n) * dim);
        cpu::embedding(want.data(), ids.data(), host_table, dtype, n, dim, kVocab);
        auto d_ids = to_device(ids);
        DeviceBuffer<float> d_x(want.size());
        cuda::embedding(d_x.data(), d_ids.data(), dev_table, dtype, n, dim, kVocab);
        EXPECT_EQ(bits(d_x.to_host()), bits(want))
            << dtype_name(dtype) << " n=" << n << " dim=" << dim;
      }
    }
  }
}

TEST(GpuKernels, EmbeddingPoisonsRowsWhoseIdIsOutsideTheTable) {
  KVHEAP_REQUIRE_DEVICE();
  const int dim = 172, rows = 5;
  const std::vector<float> table = random_floats(static_cast<std::size_t>(rows) * dim, 3);
  const std::vector<int> ids = {0, -1, 4, 5, 2};
  std::vector<float> want(ids.size() * dim);
  cpu::embedding(want.data(), ids.data(), table.data(), DType::F32, 5, dim, rows);
  auto d_table = to_device(table);
  auto d_ids = to_device(ids);
  DeviceBuffer<float> d_x(want.size());
  cuda::embedding(d_x.data(), d_ids.data(), d_table.data(), DType::F32, 5, dim, rows);
  const std::vector<float> got = d_x.to_host();
  EXPECT_EQ(bits(got), bits(want));
  EXPECT_TRUE(std::isnan(got[1 * dim])) << "id -1 must give a NaN row";
  EXPECT_TRUE(std::isnan(got[3 * dim + dim - 1])) << "id == table_rows must give a NaN row";
  EXPECT_EQ(got[2 * dim], table[4 * dim]);
}

// RMSNorm: the mean of squares is summed left to right on the CPU and as a tree here, so results
// differ by rounding only: about sqrt(dim) x 2^-24 relative in the sum, halved by the square root.
TEST(GpuKernels, RmsnormMatchesCpuTwinInPlaceAndOutOfPlace) {
  KVHEAP_REQUIRE_DEVICE();
  for (int dim : kDims) {
    const std::vector<float> weight = random_floats(dim, 100 + dim, 0.5f, 1.5f);
    auto d_weight = to_device(weight);
    for (int n : kRows) {
      const std::vector<float> x = random_floats(static_cast<std::size_t>(n) * dim, n * dim, -3, 3);
      std::vector<float> want(x.size());
      cpu::rmsnorm(want.data(), x.data(), weight.data(), n, dim, 1e-5f);
      auto d_x = to_device(x);
      DeviceBuffer<float> d_out(x.size());
      cuda::rmsnorm(d_out.data(), d_x.data(), d_weight.data(), n, dim, 1e-5f);
      EXPECT_TRUE(rel_close(d_out.to_host(), want, 1e-6)) << "n=" << n << " dim=" << dim;
      cuda::rmsnorm(d_x.data(), d_x.data(), d_weight.data(), n, dim, 1e-5f);  // out aliases x
      EXPECT_TRUE(rel_close(d_x.to_host(), want, 1e-6)) << "in place, n=" << n << " dim=" << dim;
    }
  }
}

// Per-head q/k norm: a warp per head here, rows of head_dim left to right in the twin, so results
// differ by rounding only. Head widths below a warp, equal to one, not a multiple of one, and
// Qwen3's 128; head counts with and without grouped-query sharing, and a partly filled last block.
TEST(GpuKernels, QkNormMatchesCpuTwin) {
  KVHEAP_REQUIRE_DEVICE();
  struct Heads {
    int q, kv;
  };
  for (int head_dim : {8, 32, 72, 128}) {
    const std::vector<float> q_gain = random_floats(head_dim, 200 + head_dim, 0.5f, 1.5f);
    const std::vector<float> k_gain = random_floats(head_dim, 300 + head_dim, 0.5f, 1.5f);
    auto d_q_gain = to_device(q_gain);
    auto d_k_gain = to_device(k_gain);
    for (const Heads h : {Heads{1, 1}, Heads{4, 2}, Heads{16, 8}}) {
      for (int n : kRows) {
        std::vector<float> q =
            random_floats(static_cast<std::size_t>(n) * h.q * head_dim, n + head_dim, -3, 3);
        std::vector<float> k =
            random_floats(static_cast<std::size_t>(n) * h.kv * head_dim, n * head_dim, -3, 3);
        auto d_q = to_device(q);
        auto d_k = to_device(k);
        cpu::qk_norm(q.data(), k.data(), q_gain.data(), k_gain.data(), n, h.q, h.kv, head_dim,
                     1e-6f);
        cuda::qk_norm(d_q.data(), d_k.data(), d_q_gain.data(), d_k_gain.data(), n, h.q, h.kv,
                      head_dim, 1e-6f);
        EXPECT_TRUE(rel_close(d_q.to_host(), q, 1e-6))
            << "q, head_dim=" << head_dim << " heads=" << h.q << " n=" << n;
        EXPECT_TRUE(rel_close(d_k.to_host(), k, 1e-6))
            << "k, head_dim=" << head_dim << " kv heads=" << h.kv << " n=" << n;
      }
    }
  }
}

TEST(GpuKernels, RopeMatchesCpuTwinInBothPairings) {
  KVHEAP_REQUIRE_DEVICE();
  for (int head_dim : {8, 64, 128}) {
    ModelConfig c = preset("tiny");
    c.head_dim = head_dim;
    c.rope_theta = head_dim == 128 ? 500000.0f : 10000.0f;
    const std::vector<float> inv_freq = rope_inv_freq(c);
    auto d_inv_freq = to_device(inv_freq);
    for (int n_heads : {1, 3}) {
      for (int n : kRows) {
        // Positions up to 8191: the angles reach thousands of radians, where a fast sine
        // approximation would be visibly off.
        std::vector<int> pos(n);
        for (int r = 0; r < n; ++r) pos[r] = r == 0 ? 0 : (r * 2654435761u) % 8192;
        auto d_pos = to_device(pos);
        for (bool interleaved : {true, false}) {
          std::vector<float> x =
              random_floats(static_cast<std::size_t>(n) * n_heads * head_dim, head_dim + n);
          auto d_x = to_device(x);
          cpu::rope(x.data(), pos.data(), n, n_heads, head_dim, inv_freq.data(), interleaved);
          cuda::rope(d_x.data(), d_pos.data(), n, n_heads, head_dim, d_inv_freq.data(),
                     interleaved);
          EXPECT_TRUE(rel_close(d_x.to_host(), x, 1e-6))
              << "head_dim=" << head_dim << " heads=" << n_heads << " n=" << n
              << (interleaved ? " interleaved" : " halves");
        }
      }
    }
  }
}

// Counts that are and are not multiples of 4, and views that start 4 bytes into an allocation,
// so both the float4 path and the scalar path run.
TEST(GpuKernels, SwigluAndResidualAddMatchCpuTwin) {
  KVHEAP_REQUIRE_DEVICE();
  for (long count : {1L, 3L, 17L, 64L * 3, 172L * 17, 768L * 3 + 1}) {
    for (int offset : {0, 1}) {
      const auto size = static_cast<std::size_t>(count + offset);
      const std::vector<float> gate = random_floats(size, static_cast<unsigned>(count), -6, 6);
      const std::vector<float> up = random_floats(size, static_cast<unsigned>(count) + 1);
      std::vector<float> want_g = gate, want_x = gate;
      cpu::swiglu(want_g.data() + offset, up.data() + offset, count);
      cpu::residual_add(want_x.data() + offset, up.data() + offset, count);
      auto d_gate = to_device(gate);
      auto d_x = to_device(gate);
      auto d_up = to_device(up);
      cuda::swiglu(d_gate.data() + offset, d_up.data() + offset, count);
      cuda::residual_add(d_x.data() + offset, d_up.data() + offset, count);
      // expf differs from the host's by at most a couple of ulps; the add is the same IEEE
      // operation on both sides, so it is exact.
      EXPECT_TRUE(rel_close(d_gate.to_host(), want_g, 1e-6)) << count << " +" << offset;
      EXPECT_EQ(bits(d_x.to_host()), bits(want_x)) << count << " +" << offset;
    }
  }
}

// Values that probe the rounding: exact ties (round to even), the fp16 overflow threshold,
// fp16 subnormals, fp32 subnormals (bf16 keeps them), infinities and signed zeros.
std::vector<float> rounding_probes(std::size_t count, unsigned seed) {
  std::vector<float> v = random_floats(count, seed, -70000.0f, 70000.0f);
  const float probes[] = {0.0f,
                          -0.0f,
                          1.0f + 0x1p-11f,
                          1.0f + 3 * 0x1p-11f,
                          1.0f + 0x1p-8f,
                          1.0f + 3 * 0x1p-8f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          -65520.0f,
                          1e30f,
                          0x1p-24f,
                          0x1p-25f,
                          3 * 0x1p-26f,
                          1e-40f,
                          -1e-40f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          3.14159265f,
                          -1e-3f};
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i % 3 == 0) v[i] = probes[(i / 3) % std::size(probes)];
    if (i % 3 == 1) v[i] *= 1e-4f;  // small magnitudes too
  }
  return v;
}

TEST(GpuKernels, CastRoundsToNearestEvenLikeTheHostConversions) {
  KVHEAP_REQUIRE_DEVICE();
  for (long count : {1L, 3L, 17L, 172L * 3, 768L * 17}) {
    const std::vector<float> in = rounding_probes(static_cast<std::size_t>(count), count);
    auto d_in = to_device(in);
    for (DType dtype : {DType::F16, DType::BF16}) {
      std::vector<std::uint16_t> want(in.size());
      cpu::cast_from_f32(want.data(), dtype, in.data(), count);
      DeviceBuffer<std::uint16_t> d_out(in.size());
      cuda::cast_from_f32(d_out.data(), dtype, d_in.data(), count);
      EXPECT_EQ(d_out.to_host(), want) << dtype_name(dtype) << " count=" << count;
    }
    DeviceBuffer<float> d_copy(in.size());
    cuda::cast_from_f32(d_copy.data(), DType::F32, d_in.data(), count);
    EXPECT_EQ(bits(d_copy.to_host()), bits(in)) << "fp32 count=" << count;
  }
}

TEST(GpuKernels, CastKeepsNaNsNaN) {
  KVHEAP_REQUIRE_DEVICE();
  // NaN payloads may differ between the host code and the intrinsics; NaN-ness may not.
  const std::vector<float> in = {std::numeric_limits<float>::quiet_NaN(),
                                 -std::numeric_limits<float>::quiet_NaN(),
                                 std::bit_cast<float>(0x7f800001u)};
  auto d_in = to_device(in);
  DeviceBuffer<std::uint16_t> d_out(in.size());
  cuda::cast_from_f32(d_out.data(), DType::F16, d_in.data(), 3);
  for (std::uint16_t h : d_out.to_host()) EXPECT_TRUE(std::isnan(fp16_to_float(h))) << h;
  cuda::cast_from_f32(d_out.data(), DType::BF16, d_in.data(), 3);
  for (std::uint16_t h : d_out.to_host()) EXPECT_TRUE(std::isnan(bf16_to_float(h))) << h;
}

TEST(GpuKernels, AddBiasMatchesCpuTwinAndNullIsANoOp) {
  KVHEAP_REQUIRE_DEVICE();
  for (int dim : kDims) {
    const std::vector<float> bias = random_floats(dim, dim);
    auto d_bias = to_device(bias);
    for (int n : kRows) {
      std::vector<float> y = random_floats(static_cast<std::size_t>(n) * dim, n + dim);
      auto d_y = to_device(y);
      cuda::add_bias(d_y.data(), nullptr, n, dim);
      EXPECT_EQ(bits(d_y.to_host()), bits(y)) << "null bias changed the output";
      cpu::add_bias(y.data(), bias.data(), n, dim);
      cuda::add_bias(d_y.data(), d_bias.data(), n, dim);
      EXPECT_EQ(bits(d_y.to_host()), bits(y)) << "n=" << n << " dim=" << dim;
    }
  }
}

std::vector<int> tokens(const std::vector<SampledToken>& picks) {
  std::vector<int> out;
  for (const SampledToken& t : picks) out.push_back(t.token);
  return out;
}

/// Greedy jobs over every row, on the host and on the device: the same tokens and statistics.
void expect_greedy_twins_agree(const std::vector<float>& logits, int rows, int vocab) {
  std::vector<SampledToken> want(rows);
  cpu::sample_rows(want.data(), logits.data(), rows, vocab, nullptr, rows);
  auto d_logits = to_device(logits);
  DeviceBuffer<SampledToken> d_out(rows);
  cuda::sample_rows(d_out.data(), d_logits.data(), vocab, nullptr, rows, nullptr, 0, nullptr);
  const std::vector<SampledToken> got = d_out.to_host();
  for (int r = 0; r < rows; ++r) {
    EXPECT_EQ(got[r].token, want[r].token) << "row " << r << " vocab=" << vocab;
    EXPECT_EQ(bits(std::vector<float>{got[r].best, got[r].second, got[r].max_abs}),
              bits(std::vector<float>{want[r].best, want[r].second, want[r].max_abs}))
        << "row " << r << " vocab=" << vocab;
  }
}

TEST(GpuKernels, GreedyPicksTheLowestIndexOfTiedMaxima) {
  KVHEAP_REQUIRE_DEVICE();
  const float inf = std::numeric_limits<float>::infinity();
  for (int vocab : {1, 8, 33, 1000, 32000}) {
    for (int rows : kRows) {
      std::vector<float> logits = random_floats(static_cast<std::size_t>(rows) * vocab, vocab);
      for (int r = 0; r < rows; ++r) {
        float* row = &logits[static_cast<std::size_t>(r) * vocab];
        // Plant ties far apart (other threads, other warps) and at neighbouring indices.
        const int a = (r * 131) % vocab, b = (a + 1 + r * 977) % vocab;
        const float top = r % 4 == 3 ? inf : 5.0f;
        row[a] = top;
        row[b] = top;
        if (r % 5 == 4) std::fill(row, row + vocab, -inf);  // all -inf: index 0
      }
      expect_greedy_twins_agree(logits, rows, vocab);
      // The host twin's tokens are kvheap::argmax's, and its gaps kvheap::top2_gap's.
      std::vector<SampledToken> host(rows);
      cpu::sample_rows(host.data(), logits.data(), rows, vocab, nullptr, rows);
      for (int r = 0; r < rows; ++r) {
        const std::span<const float> row(&logits[static_cast<std::size_t>(r) * vocab], vocab);
        EXPECT_EQ(host[r].token, argmax(row)) << "row " << r;
        EXPECT_EQ(top2_gap(host[r]), top2_gap(row)) << "row " << r;
      }
    }
  }
}

TEST(GpuKernels, GreedyFlagsRowsHoldingNaN) {
  KVHEAP_REQUIRE_DEVICE();
  const int vocab = 1000;
  std::vector<float> logits = random_floats(3 * vocab, 9);
  logits[vocab + 517] = std::numeric_limits<float>::quiet_NaN();  // row 1 only
  std::vector<SampledToken> want(3);
  cpu::sample_rows(want.data(), logits.data(), 3, vocab, nullptr, 3);
  ASSERT_EQ(want[1].token, SampledToken::kNaNLogit);
  ASSERT_GE(want[0].token, 0);
  expect_greedy_twins_agree(logits, 3, vocab);
}

// Draws: for the same logits and uniform numbers the device picks the host twin's token. The two
// sum in different orders, and their p differ by rounding (the host does not round (x - best) / T
// first where it has AVX-512; T 0.7 makes that product inexact), so a draw may part where u * mass
// (or the nucleus' cut) lies within rounding of a boundary between two tokens: such near ties are
// counted and reported, and must stay rare. Rows hold ties (among them the largest logits, which a
// tiny top_p cuts inside) and masked -inf entries; the codes of a +inf row and of a row of -inf
// only must agree too.
TEST(GpuKernels, DrawsPickTheHostTwinsTokens) {
  KVHEAP_REQUIRE_DEVICE();
  const float inf = std::numeric_limits<float>::infinity();
  int jobs_run = 0, parted = 0;
  for (const int vocab : {1, 7, 1000, 32000}) {
    const int rows = 6;
    std::vector<float> logits = random_floats(static_cast<std::size_t>(rows) * vocab, vocab);
    for (float& x : logits) x *= 4.0f;  // a spread like a language model's logits
    for (int r = 0; r < rows; ++r) {
      float* row = &logits[static_cast<std::size_t>(r) * vocab];
      if (r == 1 && vocab > 2) row[vocab / 2] = row[vocab - 1] = 9.0f;  // two tied maxima
      if (r == 2)
        for (int i = 0; i < vocab; i += 3) row[i] = -inf;  // masked tokens
      if (r == 3 && vocab >= 10)
        for (int t = 0; t < 10; ++t) row[t * (vocab / 10)] = 40.0f;  // ten tied maxima
      if (r == 4) row[vocab - 1] = inf;
      if (r == 5) std::fill(row, row + vocab, -inf);
    }
    std::vector<SamplingJob> jobs;
    std::vector<float> temperature;  // each job's
    std::vector<int> draws;          // the jobs that draw
    std::uint64_t state = 99;
    for (int r = 0; r < rows; ++r)
      for (const float t : {0.0f, 1e-45f, 0.5f, 0.7f, 1.0f, 2.0f})  // 1e-45: 1 / T overflows
        for (const float p : {1e-6f, 0.3f, 0.9f, 1.0f}) {
          state = state * 6364136223846793005ULL + 1442695040888963407ULL;
          const float u = static_cast<float>(state >> 40) * 0x1p-24f;
          if (t > 0) draws.push_back(static_cast<int>(jobs.size()));
          jobs.push_back(t > 0 ? draw_job(r, t, p, u) : SamplingJob{r, 0.0f, 1.0f, 0.0f});
          temperature.push_back(t);
        }
    const int n = static_cast<int>(jobs.size());
    const int n_draws = static_cast<int>(draws.size());
    std::vector<SampledToken> want(n);
    cpu::sample_rows(want.data(), logits.data(), rows, vocab, jobs.data(), n);
    auto d_logits = to_device(logits);
    auto d_jobs = DeviceBuffer<SamplingJob>::from_host(jobs);
    DeviceBuffer<SampledToken> d_out(n);
    auto d_draws = DeviceBuffer<int>::from_host(draws);
    DeviceBuffer<float> scratch(cuda::sample_scratch_floats(n_draws, vocab));
    cuda::sample_rows(d_out.data(), d_logits.data(), vocab, d_jobs.data(), n, d_draws.data(),
                      n_draws, scratch.data());
    const std::vector<SampledToken> got = d_out.to_host();
    for (int j = 0; j < n; ++j) {
      ++jobs_run;
      const SamplingJob& job = jobs[j];
      SCOPED_TRACE(testing::Message()
                   << "vocab " << vocab << ", job " << j << " (row " << job.row << ", T "
                   << temperature[j] << ", top_p " << job.top_p << ", u " << job.u << ")");
      const float t = temperature[j];
      if (job.row == 4 && t > 0) {
        EXPECT_EQ(want[j].token, SampledToken::kInfLogit);
      }
      if (job.row == 5 && t > 0) {
        EXPECT_EQ(want[j].token, SampledToken::kNoTokenAllowed);
      }
      if (job.row == 2 && vocab > 1 && want[j].token >= 0) {
        EXPECT_NE(want[j].token % 3, 0) << "a masked token";
      }
      if (job.row == 1 && job.top_p < 1e-3f && t > 0 && vocab > 2) {
        EXPECT_EQ(want[j].token, vocab / 2) << "the first of the tied maxima";
      }
      // Ten tied maxima hold nearly all the mass (at T <= 1 the others' p are below e^-32): top_p
      // 0.3 keeps the first four by index, floor(0.3 x 10) + 1.
      if (job.row == 3 && job.top_p == 0.3f && t > 0 && t < 2 && vocab >= 10) {
        EXPECT_EQ(want[j].token % (vocab / 10), 0) << "a tied maximum";
        EXPECT_LT(want[j].token / (vocab / 10), 4) << "one of the first four";
      }
      if (got[j].token == want[j].token) continue;
      ++parted;
      std::cout << "[ parted   ] vocab " << vocab << ", job " << j << ": device " << got[j].token
                << ", host " << want[j].token << "\n";
      EXPECT_GE(got[j].token, 0);
      EXPECT_GE(want[j].token, 0);
    }
  }
  EXPECT_LE(parted * 200, jobs_run) << parted << " of " << jobs_run << " draws parted";
}

TEST(GpuKernels, L2FlushReadsTwiceTheL2EveryRowToItsEnd) {
  KVHEAP_REQUIRE_DEVICE();
  // The benchmarks' flush: its buffer covers twice the L2 (1 MiB without one), and each flush
  // reads every row to its last element, where the row's largest value sits.
  // 0: the 512 KiB floor; 640 KiB: an L2 above it, kept small because the simulator reads slowly.
  for (const int l2 : {0, 640 << 10}) {
    L2Flush flush(l2);  // flushes once on construction
    EXPECT_GE(flush.bytes(), 2 * static_cast<std::size_t>(std::max(l2, 1 << 19)));
    EXPECT_EQ(tokens(flush.last_picks().to_host()),
              std::vector<int>(L2Flush::kRows, flush.row_len() - 1));
    Stream stream;
    flush(stream);
    EXPECT_EQ(tokens(flush.last_picks().to_host(stream)),
              std::vector<int>(L2Flush::kRows, flush.row_len() - 1));
  }
}

}  // namespace
}  // namespace kvheap
