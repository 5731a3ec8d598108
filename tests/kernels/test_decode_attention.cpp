// Chapter 2's decode attention against its CPU twin: the kernel equals cpu::attend_kv_heads over
// ContiguousRows on the same cache contents. (The KV write's bitwise check is test_kv_write.cpp,
// in the same test program.)
//
// Tolerance: 1e-5 relative to the largest |out| (test::rel_close). fp16/bf16 caches are built
// on the host already rounded, and the twin reads those same rounded values, so the dtype adds no
// error of its own: the kernels widen exactly and compute in fp32. What remains is summation order
// (shuffle trees, online softmax, split-K merges) and expf's 2 ulp, about 1e-6 in practice.
//
// In the simulator build every case runs on the CPU (each CUDA thread a fiber), so shapes are
// chosen to keep the file under a minute there; in a real build without a GPU the tests skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "base/error.hpp"
#include "common/model/model_config.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#include "kernels/decode_attention.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "kernels/kv_write.hpp"
#include "kernels/shared_prefix_attention.hpp"
#include "tests/support/device_test_support.hpp"

namespace kvheap {
namespace {

constexpr double kTol = 1e-5;

/// One attention problem: heads, a cache of `slots` reservations, and per batch row its slot and
/// context length. Cache rows beyond a row's context hold random values too, so reading past
/// n_ctx would show.
struct Problem {
  DType kv = DType::F32;
  int n_heads = 4, n_kv_heads = 2, head_dim = 64;
  int slots = 4, max_seq_len = 128;
  std::vector<int> slot;  // [n]
  std::vector<int> ctx;   // [n]
  float q_scale = 1.0f;   // larger: peakier softmax, which stresses the running max
  unsigned seed = 1;
  [[nodiscard]] int n() const { return static_cast<int>(slot.size()); }
  [[nodiscard]] int kv_dim() const { return n_kv_heads * head_dim; }
  [[nodiscard]] std::size_t cache_elems() const {
    return static_cast<std::size_t>(slots) * max_seq_len * kv_dim();
  }
};

/// Host copies of the inputs: caches in the KV dtype (raw bytes) and fp32 queries.
struct HostData {
  std::vector<unsigned char> k, v;  // [slots * max_seq_len, kv_dim] in the KV dtype
  std::vector<float> q;             // [n, n_heads, head_dim]
};

template <class F>
void with_kv_type(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::F16: f(cpu::F16Bits{}); break;
    case DType::BF16: f(cpu::BF16Bits{}); break;
  }
}

HostData make_data(const Problem& p) {
  std::mt19937 rng(p.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  HostData h;
  with_kv_type(p.kv, [&](auto tag) {
    using T = decltype(tag);
    for (auto* bytes : {&h.k, &h.v}) {
      bytes->resize(p.cache_elems() * sizeof(T));
      T* e = reinterpret_cast<T*>(bytes->data());
      for (std::size_t i = 0; i < p.cache_elems(); ++i) cpu::from_float(nd(rng), e[i]);
    }
  });
  h.q.resize(static_cast<std::size_t>(p.n()) * p.n_heads * p.head_dim);
  for (float& x : h.q) x = p.q_scale * nd(rng);
  return h;
}

/// The CPU twin over the row's slot, one KV head at a time as the GPU's blocks go.
std::vector<float> run_twin(const Problem& p, const HostData& h) {
  std::vector<float> out(h.q.size());
  const int group = p.n_heads / p.n_kv_heads;
  with_kv_type(p.kv, [&](auto tag) {
    using T = decltype(tag);
    for (int i = 0; i < p.n(); ++i) {
      const long base = static_cast<long>(p.slot[i]) * p.max_seq_len * p.kv_dim();
      const cpu::ContiguousRows<T> rows{reinterpret_cast<const T*>(h.k.data()) + base,
                                        reinterpret_cast<const T*>(h.v.data()) + base, p.kv_dim()};
      std::vector<float> scores(cpu::attend_scratch_floats(group, p.head_dim));
      const long qo = static_cast<long>(i) * p.n_heads * p.head_dim;
      for (int g = 0; g < p.n_kv_heads; ++g)
        cpu::attend_kv_heads<T>(h.q.data() + qo, rows, p.ctx[i], {p.n_kv_heads, group, p.head_dim},
                                g, g + 1, out.data() + qo, scores.data());
    }
  });
  return out;
}

/// The kernel on the same data; `force_splits` as in cuda::decode_attention.
std::vector<float> run_kernel(const Problem& p, const HostData& h, int force_splits,
                              cuda::AttentionWorkspace& ws) {
  std::vector<std::int64_t> base(p.n());
  for (int i = 0; i < p.n(); ++i) base[i] = static_cast<std::int64_t>(p.slot[i]) * p.max_seq_len;
  const auto k = DeviceBuffer<unsigned char>::from_host(h.k);
  const auto v = DeviceBuffer<unsigned char>::from_host(h.v);
  const auto q = DeviceBuffer<float>::from_host(h.q);
  const auto ctx = DeviceBuffer<int>::from_host(p.ctx);
  const auto base_row = DeviceBuffer<std::int64_t>::from_host(base);
  DeviceBuffer<float> out(h.q.size());
  const cuda::AttentionShape shape{p.n(), p.n_heads, p.n_kv_heads, p.head_dim,
                                   *std::max_element(p.ctx.begin(), p.ctx.end())};
  cuda::decode_attention(p.kv, q.data(), k.data(), v.data(), ctx.data(), base_row.data(), shape,
                         out.data(), ws, nullptr, force_splits);
  return out.to_host();
}

/// Runs kernel and twin and checks them within kTol; returns the kernel's output.
std::vector<float> expect_matches_twin(const Problem& p, int force_splits = 0) {
  const HostData h = make_data(p);
  cuda::AttentionWorkspace ws;
  std::vector<float> got = run_kernel(p, h, force_splits, ws);
  EXPECT_TRUE(test::rel_close(got, run_twin(p, h), kTol))
      << dtype_name(p.kv) << " heads " << p.n_heads << "/" << p.n_kv_heads << " head_dim "
      << p.head_dim << " rows " << p.n() << " max ctx "
      << *std::max_element(p.ctx.begin(), p.ctx.end()) << " splits " << force_splits;
  return got;
}

/// `n` rows over distinct slots in a scrambled order, contexts cycling through `contexts`.
Problem batch(int n, std::vector<int> contexts, int max_seq_len) {
  Problem p;
  p.slots = n + 2;  // two slots no row uses: their contents must not leak in
  p.max_seq_len = max_seq_len;
  p.slot.resize(p.slots);
  std::iota(p.slot.begin(), p.slot.end(), 0);
  std::shuffle(p.slot.begin(), p.slot.end(), std::mt19937(static_cast<unsigned>(n)));
  p.slot.resize(n);
  for (int i = 0; i < n; ++i)
    p.ctx.push_back(contexts[static_cast<std::size_t>(i) % contexts.size()]);
  return p;
}

TEST(DecodeAttention, MatchesTwinAcrossBatchesAndContextsFp32) {
  KVHEAP_REQUIRE_DEVICE();
  for (int n : {1, 3, 17}) {
    for (int ctx : {1, 7, 100}) {
      Problem p = batch(n, {ctx}, 100);
      expect_matches_twin(p);
    }
  }
}

TEST(DecodeAttention, MatchesTwinInFp16AndBf16) {
  KVHEAP_REQUIRE_DEVICE();
  for (DType kv : {DType::F16, DType::BF16}) {
    for (int head_dim : {8, 64, 128}) {
      Problem p = batch(3, {1, 37, 100}, 100);
      p.kv = kv;
      p.head_dim = head_dim;
      expect_matches_twin(p);
    }
  }
}

TEST(DecodeAttention, HeadDimsFromTinyToLargest) {
  KVHEAP_REQUIRE_DEVICE();
  // 8: stories260K; 24, 40: not powers of two (idle lanes); 256: two vectors per lane in fp32.
  for (DType kv : {DType::F32, DType::BF16}) {
    for (int head_dim : {8, 24, 40, 64, 128, 256}) {
      Problem p = batch(3, {5, 60, 33}, 64);
      p.kv = kv;
      p.head_dim = head_dim;
      expect_matches_twin(p);
    }
  }
}

TEST(DecodeAttention, GroupSizesOneToThirtyTwo) {
  KVHEAP_REQUIRE_DEVICE();
  // 7: Qwen2.5-7B; 3, 5, 12: padded to the kernel's power-of-two group; 20, 32: split in slices.
  for (int group : {1, 2, 3, 4, 5, 7, 8, 12, 16, 20, 32}) {
    Problem p = batch(2, {1, 50}, 50);
    p.kv = group % 2 == 0 ? DType::BF16 : DType::F32;
    p.n_kv_heads = group > 8 ? 1 : 2;
    p.n_heads = group * p.n_kv_heads;
    p.head_dim = 32;
    expect_matches_twin(p);
  }
}

TEST(DecodeAttention, LongContextsWithPeakySoftmax) {
  KVHEAP_REQUIRE_DEVICE();
  // 1000+ positions at small head counts; q scaled up so the running max moves often and matters.
  for (DType kv : {DType::F32, DType::F16}) {
    Problem p = batch(2, {1031, 1200}, 1200);
    p.kv = kv;
    p.n_heads = 2;
    p.n_kv_heads = 1;
    p.head_dim = kv == DType::F32 ? 64 : 8;
    p.q_scale = 4.0f;
    expect_matches_twin(p);
  }
}

TEST(DecodeAttention, MixedContextsAndUnorderedSlotsInOneBatch) {
  KVHEAP_REQUIRE_DEVICE();
  Problem p = batch(17, {1, 2, 7, 31, 64, 100, 3}, 100);
  p.kv = DType::BF16;
  p.n_heads = 8;
  p.head_dim = 64;
  p.q_scale = 2.0f;
  expect_matches_twin(p);
  // A decode batch with Llama's head_dim: long and short sequences side by side.
  Problem l = batch(17, {1, 1024, 77, 1500}, 1500);
  l.kv = DType::BF16;
  l.n_heads = 4;
  l.n_kv_heads = 1;
  l.head_dim = 128;
  expect_matches_twin(l);
}

TEST(DecodeAttention, SplitKEqualsSinglePass) {
  KVHEAP_REQUIRE_DEVICE();
  // Short rows in the batch leave some splits empty (n_ctx < splits): they must merge as nothing.
  for (DType kv : {DType::F32, DType::BF16}) {
    Problem p = batch(3, {300, 5, 2}, 300);
    p.kv = kv;
    p.n_heads = 6;
    p.n_kv_heads = 2;
    p.head_dim = kv == DType::F32 ? 128 : 40;
    p.q_scale = 2.0f;
    const std::vector<float> single = expect_matches_twin(p, 1);
    for (int splits : {2, 3, 7}) {
      const std::vector<float> split = expect_matches_twin(p, splits);
      EXPECT_TRUE(test::rel_close(split, single, kTol)) << splits << " splits";
    }
    expect_matches_twin(p, 0);  // the automatic choice
  }
}

TEST(DecodeAttention, EverySplitCountTheRuleCanChooseMatchesTwin) {
  KVHEAP_REQUIRE_DEVICE();
  // 1 to kMaxSplits, all the split rule can choose (tests/kernels/test_attention_merge.cpp): each
  // equals the twin, and the single pass. Rows of 2 and 150 positions: most of the short row's
  // splits are empty, the long row's shortest have 2 positions.
  Problem p = batch(2, {150, 2}, 150);
  p.n_heads = 2;
  p.n_kv_heads = 1;
  p.head_dim = 32;
  p.q_scale = 2.0f;
  const std::vector<float> single = expect_matches_twin(p, 1);
  for (int splits = 2; splits <= kMaxSplits; ++splits)
    EXPECT_TRUE(test::rel_close(expect_matches_twin(p, splits), single, kTol)) << splits;
}

TEST(DecodeAttention, AutomaticSplitFillsOneWaveOfTheDevice) {
  KVHEAP_REQUIRE_DEVICE();
  // One row, one KV head of 4 query heads: the plan splits until sm_count x the kernel's blocks
  // per SM are resident, as far as chunks of min_split_positions() = 256 allow.
  const cuda::AttentionShape shape{1, 4, 1, 128, 32768};
  const int per_sm = cuda::detail::attention_blocks_per_sm(128, 4);
  ASSERT_GT(per_sm, 0);
  // The simulator keeps an sm_90's limits and takes registers at the most a thread can have
  // (255): two blocks of 128 threads fill its 64 K register file.
  if (is_simulator()) {
    EXPECT_EQ(per_sm, 2);
  }
  const int resident = device_info().sm_count * per_sm;
  const int splits = cuda::detail::plan_attention(shape, 0).splits;
  EXPECT_EQ(splits, std::min(kMaxSplits, resident)) << per_sm << " blocks per SM";
  // A short context keeps chunks of at least 256 positions: 1000 positions, 3 chunks; 300, one.
  const cuda::AttentionShape short_ctx{1, 4, 1, 128, 1000};
  EXPECT_EQ(cuda::detail::plan_attention(short_ctx, 0).splits, std::min(1000 / 256, splits));
  const cuda::AttentionShape shorter{1, 4, 1, 128, 300};
  EXPECT_EQ(cuda::detail::plan_attention(shorter, 0).splits, 1);
}

TEST(DecodeAttention, PrefillRowsAttendCausallyAfterKvWrite) {
  KVHEAP_REQUIRE_DEVICE();
  // One sequence's prompt as rows at positions 0..P-1, written with the KV write kernel first,
  // then attention with n_ctx = pos + 1 per row: each row must see only its own prefix.
  Problem p;
  p.kv = DType::F16;
  p.n_heads = 4;
  p.n_kv_heads = 2;
  p.head_dim = 64;
  p.slots = 3;
  p.max_seq_len = 40;
  const int prompt = 37, slot = 2;
  for (int pos = 0; pos < prompt; ++pos) {
    p.slot.push_back(slot);
    p.ctx.push_back(pos + 1);
  }
  HostData h = make_data(p);  // random cache contents; the prompt rows are overwritten below
  std::vector<float> k(static_cast<std::size_t>(prompt) * p.kv_dim()), v(k.size());
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : k) x = nd(rng);
  for (float& x : v) x = nd(rng);
  std::vector<std::int64_t> dst(prompt);
  for (int pos = 0; pos < prompt; ++pos) dst[pos] = static_cast<std::int64_t>(slot) * 40 + pos;
  auto dk = DeviceBuffer<unsigned char>::from_host(h.k);
  auto dv = DeviceBuffer<unsigned char>::from_host(h.v);
  cuda::kv_write(p.kv, dk.data(), dv.data(), DeviceBuffer<float>::from_host(k).data(),
                 DeviceBuffer<float>::from_host(v).data(),
                 DeviceBuffer<std::int64_t>::from_host(dst).data(), prompt, p.kv_dim());
  cpu::kv_write(p.kv, h.k.data(), h.v.data(), k.data(), v.data(), dst.data(), prompt, p.kv_dim());
  ASSERT_EQ(dk.to_host(), h.k);
  ASSERT_EQ(dv.to_host(), h.v);
  cuda::AttentionWorkspace ws;
  EXPECT_TRUE(test::rel_close(run_kernel(p, h, 0, ws), run_twin(p, h), kTol));
}

TEST(DecodeAttention, EmptyContextGivesZeros) {
  KVHEAP_REQUIRE_DEVICE();
  Problem p = batch(3, {0, 9, 0}, 16);
  const HostData h = make_data(p);
  cuda::AttentionWorkspace ws;
  for (int splits : {1, 3}) {
    const std::vector<float> got = run_kernel(p, h, splits, ws);
    const std::size_t row = static_cast<std::size_t>(p.n_heads) * p.head_dim;
    EXPECT_TRUE(std::all_of(got.begin(), got.begin() + row, [](float x) { return x == 0.0f; }));
    EXPECT_TRUE(std::all_of(got.end() - row, got.end(), [](float x) { return x == 0.0f; }));
  }
  EXPECT_GT(ws.bytes(), 0u);  // the split run grew the workspace
}

TEST(DecodeAttention, RejectsShapesTheKernelCannotRun) {
  // Checked on the host before anything touches a device, so this runs everywhere.
  cuda::AttentionWorkspace ws;
  auto attempt = [&](int n_heads, int n_kv_heads, int head_dim) {
    const cuda::AttentionShape s{1, n_heads, n_kv_heads, head_dim, 1};
    cuda::decode_attention(DType::F32, nullptr, nullptr, nullptr, nullptr, nullptr, s, nullptr, ws);
  };
  EXPECT_THROW(attempt(4, 2, 12), InputError);   // not a multiple of 8
  EXPECT_THROW(attempt(4, 2, 264), InputError);  // above 256
  EXPECT_THROW(attempt(6, 4, 64), InputError);   // heads do not group
}

// SharedPrefixPlan::positions_read counts the slices of a wide row as the kernel's plan cuts them:
// for every group width and head_dim the plan's heads per block is slice_heads of the group at
// gpu_heads_per_block.
TEST(DecodeAttentionPlan, SlicesAreEvenAsSharedPrefixReadsCountThem) {
  for (int hd : {64, 128, 256})
    for (int heads = 1; heads <= 200; ++heads) {
      cuda::AttentionShape s;
      s.n = 0;  // no device is asked: the plan's slices depend on the shape alone
      s.n_kv_heads = 1;
      s.n_heads = heads;
      s.head_dim = hd;
      const cuda::detail::AttentionPlan plan = cuda::detail::plan_attention(s, 0);
      EXPECT_EQ(plan.heads_per_block, slice_heads(heads, gpu_heads_per_block(hd)))
          << heads << " heads, head_dim " << hd;
      EXPECT_EQ(plan.chunks, (heads + plan.heads_per_block - 1) / plan.heads_per_block);
    }
}

}  // namespace
}  // namespace kvheap
