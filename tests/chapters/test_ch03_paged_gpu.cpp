// Chapter 3's claims on the device: paging changes where K and V live, never what attention
// computes. cuda::paged_attention is bitwise equal to chapter 2's cuda::decode_attention on the
// same cache contents (any block size, shuffled blocks, fp32 and bf16, every split count the split
// rule can choose), and
// the GPU decoder over PagedCache in device memory returns the same logits, bit for bit, as over
// ContiguousCache in device memory.
//
// In the simulator build every kernel runs on the CPU; in a real build they run on the GPU and
// skip with a message when there is none.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "base/error.hpp"
#include "chapters/02_contiguous_gpu/contiguous_cache.hpp"
#include "chapters/03_paged_blocks/paged_cache.hpp"
#include "common/forward/cuda/forward_gpu.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/serving/sampler.hpp"
#include "common/model/synthetic_weights.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#include "kernels/decode_attention.hpp"
#include "kernels/decode_attention_cpu.hpp"
#include "kernels/paged_attention.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

#define KVHEAP_REQUIRE_DEVICE()                                                                 \
  if (auto why_ = device_unavailable_reason()) {                                                \
    GTEST_SKIP() << *why_ << "; paged attention runs on a GPU or in the KVHEAP_CUDA=sim build"; \
  }

constexpr int kBlockSizes[] = {1, 3, 7, 16, 17, 64};

/// Random values stored in the KV dtype (fp32 or bf16, the dtypes tested here), as raw bytes.
std::vector<unsigned char> random_rows(DType kv, std::size_t elems, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<unsigned char> bytes(elems * dtype_size(kv));
  for (std::size_t i = 0; i < elems; ++i) {
    const float x = nd(rng);
    if (kv == DType::F32) {
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    } else {
      cpu::BF16Bits b{};
      cpu::from_float(x, b);
      std::memcpy(bytes.data() + 2 * i, &b.bits, 2);
    }
  }
  return bytes;
}

/// One paged problem and its contiguous twin: sequences grown through the real allocator (shuffled
/// pool), a pool with random contents everywhere (unused blocks included, so a wrong lookup
/// shows), and the same positions copied into a chapter 2 layout with scrambled slots.
struct Twins {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0, max_ctx = 0;
  std::vector<int> ctx;                       // [n]
  KVView pages;                               // CSR view of the paged side
  std::vector<unsigned char> pool_k, pool_v;  // [num_blocks * block_size, kv_dim]
  std::vector<unsigned char> flat_k, flat_v;  // [(n + 1) * max_ctx, kv_dim]
  std::vector<std::int64_t> base_row;         // [n] contiguous slot * max_ctx
  std::vector<float> q;                       // [n, n_heads, head_dim]
};

Twins make_twins(DType kv, int block_size, const std::vector<int>& ctx, int n_heads, int n_kv_heads,
                 int head_dim) {
  Twins t;
  t.n_heads = n_heads;
  t.n_kv_heads = n_kv_heads;
  t.head_dim = head_dim;
  t.max_ctx = *std::max_element(ctx.begin(), ctx.end());
  t.ctx = ctx;
  const int n = static_cast<int>(ctx.size());
  const std::size_t kv_dim = static_cast<std::size_t>(n_kv_heads) * head_dim;
  const std::size_t esz = dtype_size(kv);
  int blocks = 3;  // spare blocks that no sequence owns
  for (int c : ctx) blocks += (c + block_size - 1) / block_size;
  ch03::BlockManager m(blocks, block_size, /*shuffle_seed=*/1000 + block_size);
  Batch batch;  // one decode row per sequence, at its last position
  for (int i = 0; i < n; ++i) {
    const int s = m.allocate();
    for (int p = 0; p + 1 < ctx[i]; ++p) (void)m.append_slot(s);
    batch.rows.push_back({0, s, ctx[i] - 1, true});
  }
  t.pages = ch03::paged_view(m, batch);
  std::mt19937 rng(static_cast<unsigned>(block_size) * 31 + static_cast<unsigned>(kv));
  const std::size_t pool_rows = static_cast<std::size_t>(blocks) * block_size;
  t.pool_k = random_rows(kv, pool_rows * kv_dim, rng);
  t.pool_v = random_rows(kv, pool_rows * kv_dim, rng);
  const std::size_t flat_rows = static_cast<std::size_t>(n + 1) * t.max_ctx;
  t.flat_k = random_rows(kv, flat_rows * kv_dim, rng);
  t.flat_v = random_rows(kv, flat_rows * kv_dim, rng);
  std::vector<int> slot(n + 1);  // scrambled, and one slot no row uses
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), rng);
  const std::size_t row_bytes = kv_dim * esz;
  for (int i = 0; i < n; ++i) {
    t.base_row.push_back(static_cast<std::int64_t>(slot[i]) * t.max_ctx);
    for (int p = 0; p < ctx[i]; ++p) {
      const std::size_t src = static_cast<std::size_t>(m.slot_of(batch.rows[i].seq, p));
      const std::size_t dst = static_cast<std::size_t>(t.base_row[i] + p);
      std::memcpy(&t.flat_k[dst * row_bytes], &t.pool_k[src * row_bytes], row_bytes);
      std::memcpy(&t.flat_v[dst * row_bytes], &t.pool_v[src * row_bytes], row_bytes);
    }
  }
  std::normal_distribution<float> nd(0.0f, 2.0f);  // sharper softmax than unit queries
  t.q.resize(static_cast<std::size_t>(n) * n_heads * head_dim);
  for (float& x : t.q) x = nd(rng);
  return t;
}

/// Runs both kernels with `splits` and expects identical bytes.
void expect_twins_bitwise_equal(DType kv, int block_size, int splits, const Twins& t) {
  const int n = static_cast<int>(t.ctx.size());
  const cuda::AttentionShape shape{n, t.n_heads, t.n_kv_heads, t.head_dim, t.max_ctx};
  const auto q = DeviceBuffer<float>::from_host(t.q);
  const auto n_ctx = DeviceBuffer<int>::from_host(t.ctx);
  cuda::AttentionWorkspace ws;

  const auto fk = DeviceBuffer<unsigned char>::from_host(t.flat_k);
  const auto fv = DeviceBuffer<unsigned char>::from_host(t.flat_v);
  const auto base = DeviceBuffer<std::int64_t>::from_host(t.base_row);
  DeviceBuffer<float> out_flat(t.q.size());
  cuda::decode_attention(kv, q.data(), fk.data(), fv.data(), n_ctx.data(), base.data(), shape,
                         out_flat.data(), ws, nullptr, splits);

  const auto pk = DeviceBuffer<unsigned char>::from_host(t.pool_k);
  const auto pv = DeviceBuffer<unsigned char>::from_host(t.pool_v);
  const auto indptr = DeviceBuffer<int>::from_host(t.pages.indptr);
  const auto indices = DeviceBuffer<int>::from_host(t.pages.indices);
  const auto last = DeviceBuffer<int>::from_host(t.pages.last_page_len);
  const auto row_seq = DeviceBuffer<int>::from_host(t.pages.row_seq);
  const PagedLocator loc{indptr.data(), indices.data(), last.data(), row_seq.data(), block_size};
  DeviceBuffer<float> out_paged(t.q.size());
  out_paged.fill_bytes(0xff);  // NaN: an output the kernel forgot to write cannot match
  cuda::paged_attention(kv, q.data(), pk.data(), pv.data(), n_ctx.data(), loc, shape,
                        out_paged.data(), ws, nullptr, splits);

  const std::vector<float> want = out_flat.to_host(), got = out_paged.to_host();
  ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
      << dtype_name(kv) << ", block size " << block_size << ", splits " << splits
      << ": paged attention differs from contiguous (max rel diff " << test::max_rel_diff(got, want)
      << ")";
  EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](float x) { return x != 0.0f; }));
}

TEST(Ch03PagedGpu, PagedAttentionBitwiseEqualsContiguousKernel) {
  KVHEAP_REQUIRE_DEVICE();
  // Mixed contexts: one position, a partly filled last block, several blocks. Shapes: fp32 with a
  // GQA group of 2 and head_dim 64; bf16 with Llama's group of 4 and head_dim 128; and groups of
  // one (multi-head attention, as in stories15M), where nvcc unrolls the two layouts' loops
  // differently and only the kernel's explicit rounding (mul_rn, fma_rn) keeps them equal.
  struct Shape {
    DType kv;
    int n_heads, n_kv_heads, head_dim;
  };
  const std::vector<int> ctx = {1, 45, 130};
  for (const Shape& sh :
       {Shape{DType::F32, 4, 2, 64}, Shape{DType::BF16, 8, 2, 128}, Shape{DType::F32, 2, 2, 128},
        Shape{DType::BF16, 2, 2, 64}, Shape{DType::F16, 2, 2, 40}}) {
    for (int bs : kBlockSizes) {
      const Twins t = make_twins(sh.kv, bs, ctx, sh.n_heads, sh.n_kv_heads, sh.head_dim);
      for (int splits : {1, 3}) expect_twins_bitwise_equal(sh.kv, bs, splits, t);
    }
  }
}

TEST(Ch03PagedGpu, PagedAttentionBitwiseEqualsContiguousAcrossTheSplitCounts) {
  KVHEAP_REQUIRE_DEVICE();
  // Counts the split rule can choose, 1 to kMaxSplits (tests/kernels/test_attention_merge.cpp),
  // with Llama's group of 4 in bf16: 1-8, where a split of the 200-position row spans several
  // 16-slot blocks and, below 4, more than one 64-position tile; primes and powers of two on the
  // way; and the largest, where most splits hold 3 or 4 positions. The 3-position row leaves most
  // splits of its block empty.
  const std::vector<int> ctx = {3, 200};
  const Twins t = make_twins(DType::BF16, 16, ctx, 4, 1, 64);
  for (int splits : {1, 2, 3, 4, 5, 6, 7, 8, 13, 16, 31, 32, 47, 63, kMaxSplits})
    expect_twins_bitwise_equal(DType::BF16, 16, splits, t);
}

TEST(Ch03PagedGpu, PagedAttentionRejectsBlockSizeZero) {
  // Checked on the host before anything touches a device, so this runs everywhere.
  cuda::AttentionWorkspace ws;
  const cuda::AttentionShape shape{1, 4, 2, 64, 1};
  const int zero = 0;
  const PagedLocator loc{&zero, &zero, &zero, &zero, /*block_size=*/0};
  EXPECT_THROW(cuda::paged_attention(DType::F32, nullptr, nullptr, nullptr, nullptr, loc, shape,
                                     nullptr, ws),
               InputError);
}

TEST(Ch03PagedGpu, PagedAttentionRejectsAPageOf2GiB) {
  // The kernel addresses a row inside its page in 32 bits: 2^20 rows of 2 KV heads x 256 fp32
  // (2 KiB) are a 2 GiB page, refused on the host before anything touches a device.
  cuda::AttentionWorkspace ws;
  const cuda::AttentionShape shape{1, 4, 2, 256, 1};
  const int zero = 0;
  const PagedLocator loc{&zero, &zero, &zero, &zero, /*block_size=*/1 << 20};
  try {
    cuda::paged_attention(DType::F32, nullptr, nullptr, nullptr, nullptr, loc, shape, nullptr, ws);
    ADD_FAILURE() << "a 2 GiB page was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is 2147483648 bytes; the kernel addresses a page's rows "
                                         "in 32 bits"),
              std::string::npos)
        << e.what();
  }
}

/// The contiguous run: batches, and the logits of each step. Sequences 0 and 1 prefill together;
/// sequence 2's prompt joins at step 2 beside the others' decode rows (a mixed batch). Tokens come
/// from greedy decoding on this run, so both caches see identical inputs.
struct Reference {
  std::vector<Batch> batches;              // slot field = sequence index 0..2
  std::vector<std::vector<float>> logits;  // [steps][logit rows * vocab]
};

Reference run_contiguous(GpuForward& fwd, DType kv, int steps) {
  const ModelConfig& c = fwd.config();
  const std::vector<std::vector<int>> prompts = {{1, 5, 9, 2, 77, 31, 4}, {1}, {1, 60, 61, 62}};
  ch02::ContiguousCache cache(c, kv, 3, Memory::kDevice);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(cache.admit(), s);
  std::vector<int> next(3, -1);  // next token per sequence; -1 = not started
  Reference ref;
  for (int step = 0; step < steps; ++step) {
    Batch b;
    for (int s = 0; s < 3; ++s) {
      if (next[s] >= 0) {
        b.rows.push_back({next[s], s, cache.length(s), true});
      } else if (s < 2 || step == 2) {
        for (std::size_t p = 0; p < prompts[s].size(); ++p)
          b.rows.push_back({prompts[s][p], s, static_cast<int>(p), p + 1 == prompts[s].size()});
      }
    }
    const auto l = fwd.forward(b, cache);
    ref.logits.emplace_back(l.begin(), l.end());
    int row = 0;
    for (const BatchRow& r : b.rows) {
      if (!r.wants_logits) continue;
      next[r.seq] =
          argmax(std::span<const float>(&ref.logits.back()[row * c.vocab_size], c.vocab_size));
      ++row;
    }
    ref.batches.push_back(b);
  }
  return ref;
}

/// Replays the reference's batches over a paged cache and expects identical logits at every step.
void expect_paged_replay_bitwise_equal(GpuForward& fwd, DType kv, const Reference& ref,
                                       int block_size) {
  ch03::PagedCache paged(fwd.config(), kv, 256, block_size, block_size * 7919 + 1, Memory::kDevice);
  std::vector<int> seq;
  for (int s = 0; s < 3; ++s) seq.push_back(paged.blocks().allocate());
  for (std::size_t step = 0; step < ref.batches.size(); ++step) {
    Batch b = ref.batches[step];
    for (BatchRow& r : b.rows) r.seq = seq[r.seq];
    const auto l = fwd.forward(b, paged);
    const std::vector<float>& want = ref.logits[step];
    ASSERT_EQ(l.size(), want.size());
    ASSERT_EQ(std::memcmp(l.data(), want.data(), want.size() * sizeof(float)), 0)
        << dtype_name(kv) << ", block size " << block_size << ", step " << step
        << ": paged logits differ from contiguous";
  }
  paged.blocks().check_invariants();
  EXPECT_EQ(paged.bytes_used(),
            paged.blocks().tokens_held() * kv_bytes_per_token(fwd.config(), kv));
}

TEST(Ch03PagedGpu, PagedLogitsBitwiseEqualContiguousGpuTiny) {
  KVHEAP_REQUIRE_DEVICE();
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 4);
  GpuForward fwd(w, DType::F32);
  const Reference ref = run_contiguous(fwd, DType::F32, 10);
  for (int bs : kBlockSizes) expect_paged_replay_bitwise_equal(fwd, DType::F32, ref, bs);
  GpuForward fwd16(w, DType::BF16);  // bf16 weights and KV
  const Reference ref16 = run_contiguous(fwd16, DType::BF16, 6);
  for (int bs : {3, 16}) expect_paged_replay_bitwise_equal(fwd16, DType::BF16, ref16, bs);
}

TEST(Ch03PagedGpu, PagedLogitsBitwiseEqualContiguousGpuStories260K) {
  KVHEAP_REQUIRE_DEVICE();
  KVHEAP_REQUIRE_MODEL(path, "stories260K.bin");
  const ModelWeights w = load_llama2c(path);
  GpuForward fwd(w, DType::F32);
  const Reference ref = run_contiguous(fwd, DType::F32, 6);
  for (int bs : kBlockSizes) expect_paged_replay_bitwise_equal(fwd, DType::F32, ref, bs);
}

TEST(Ch03PagedGpu, PoolAccountingAndExhaustion) {
  KVHEAP_REQUIRE_DEVICE();
  const ModelConfig c = preset("tiny");
  ch03::PagedCache cache(c, DType::F16, 4, 2, 5, Memory::kDevice);
  EXPECT_EQ(cache.storage_bytes(), 4u * 2 * kv_bytes_per_token(c, DType::F16));
  const int s = cache.blocks().allocate();
  Batch b;
  for (int p = 0; p < 3; ++p) b.rows.push_back({1, s, p, p == 2});
  cache.prepare(b);  // 3 tokens: 2 blocks
  EXPECT_EQ(cache.bytes_reserved(), 4u * kv_bytes_per_token(c, DType::F16));
  EXPECT_EQ(cache.bytes_used(), 3u * kv_bytes_per_token(c, DType::F16));
  Batch more;
  for (int p = 3; p < 9; ++p) more.rows.push_back({1, s, p, p == 8});  // needs a fifth block
  EXPECT_THROW(cache.prepare(more), ResourceError);
  EXPECT_EQ(cache.blocks().length(s), 3) << "a batch the pool cannot hold must change nothing";
  EXPECT_EQ(cache.bytes_used(), 3u * kv_bytes_per_token(c, DType::F16));
  cache.blocks().check_invariants();
}

}  // namespace
}  // namespace kvheap
