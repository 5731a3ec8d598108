// Chapter 4 on the device. cuda::shared_prefix_attention computes what every row reading its whole
// context computes (the CPU's plain paged attention), within 1e-5 relative, over group sizes,
// head sizes, dtypes, groups wider than one kernel block's 16 heads, and prefixes long enough to
// be split across blocks (split-K) before the merge; and the GPU decoder over SharedCache in device
// memory gives chapter 3's logits while sequences share blocks.
//
// In the simulator build every kernel runs on the CPU; in a real build they run on the GPU and
// skip with a message when there is none.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "chapters/03_paged_blocks/paged_cache.hpp"
#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "common/forward/cuda/forward_gpu.hpp"
#include "common/model/llama2c_loader.hpp"
#include "common/model/synthetic_weights.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#if defined(KVHEAP_SIM)
#include "device/sim/counters.hpp"
#endif
#include "kernels/decode_attention.hpp"
#include "kernels/paged_attention.hpp"
#include "kernels/shared_prefix_attention.hpp"
#include "kernels/shared_prefix_device.hpp"
#include "tests/chapters/ch04_scenario.hpp"
#include "tests/kernels/shared_prefix_case.hpp"
#include "tests/support/test_support.hpp"

namespace kvheap {
namespace {

#define KVHEAP_REQUIRE_DEVICE()                                                          \
  if (auto why_ = device_unavailable_reason()) {                                         \
    GTEST_SKIP() << *why_                                                                \
                 << "; shared-prefix attention runs on a GPU or in the KVHEAP_CUDA=sim " \
                    "build";                                                             \
  }

template <class T>
DeviceBuffer<unsigned char> upload_bytes(const std::vector<T>& v) {
  std::vector<unsigned char> bytes(v.size() * sizeof(T));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return DeviceBuffer<unsigned char>::from_host(bytes);
}

/// What one shared_prefix_attention call over a case read: the bytes the simulator counted
/// from its kernels' asynchronous copies (0 on a GPU), and the bytes its plan says it reads,
/// SharedPrefixPlan::positions_read at the prefix pass's heads per read.
struct BytesRead {
  long loaded = 0, planned = 0;
};

/// The device result for a case, against plain CPU attention: the largest relative difference.
/// With `side`, the rows' own pass runs on it, and the call is made twice on the same scratch.
template <class T>
double gpu_vs_plain(DType kv, const test::SharedPrefixCase<T>& c, int force_splits = 0,
                    BytesRead* read = nullptr, SideStream* side = nullptr) {
  std::vector<float> want(c.q.size());
  c.attend_plain(want.data());

  const auto k = upload_bytes(c.k), v = upload_bytes(c.v);
  const auto indptr = DeviceBuffer<int>::from_host(c.pages.indptr);
  const auto indices = DeviceBuffer<int>::from_host(c.pages.indices);
  const auto last = DeviceBuffer<int>::from_host(c.pages.last_page_len);
  const auto row_seq = DeviceBuffer<int>::from_host(c.pages.row_seq);
  const PagedLocator loc{indptr.data(), indices.data(), last.data(), row_seq.data(), c.block_size};
  const DeviceSharedPrefix plan(c.plan, c.pages.row_seq, c.pages.n_ctx);
  const SharedPrefixView& view = plan.view();

  const cuda::AttentionShape shape{c.n(), c.config.n_heads, c.config.n_kv_heads, c.config.head_dim,
                                   c.pages.max_ctx};
  const auto q = DeviceBuffer<float>::from_host(c.q);
  DeviceBuffer<float> out(c.q.size());
  DeviceBuffer<float> wide(cuda::shared_prefix_wide_q_floats(view.groups, view.widest,
                                                             c.config.n_heads, c.config.head_dim));
  cuda::AttentionWorkspace prefix_ws, own_ws;
#if defined(KVHEAP_SIM)
  const sim::ApiCounters before = sim::api_counters();
#endif
  for (int call = 0; call < (side != nullptr ? 2 : 1); ++call)
    cuda::shared_prefix_attention(kv, q.data(), k.data(), v.data(), loc, view, shape, out.data(),
                                  wide.data(), prefix_ws, own_ws, nullptr, force_splits, side);
  if (read != nullptr) {
#if defined(KVHEAP_SIM)
    read->loaded = sim::api_counters().since(before).kernel_copy_bytes;
#endif
    read->planned = c.plan.positions_read(c.pages.n_ctx, c.config.group_size(),
                                          cuda::prefix_heads_per_read(kv, c.config.head_dim)) *
                    2 * c.config.kv_dim() * static_cast<long>(sizeof(T));
  }
  return test::rel_inf_error(out.to_host(), want);
}
template <class T>
double gpu_vs_plain(DType kv, const test::SharedPrefixShape& s, const std::vector<int>& prefixes,
                    int members, int private_positions, unsigned seed, int force_splits = 0,
                    std::vector<int> members_of = {}, BytesRead* read = nullptr) {
  const test::SharedPrefixCase<T> c(s, prefixes, members, private_positions, seed, members_of);
  return gpu_vs_plain(kv, c, force_splits, read);
}

TEST(Ch04SharedPrefixGpu, EqualsEveryRowReadingItsWholeContext) {
  KVHEAP_REQUIRE_DEVICE();
  for (int group : {1, 4})
    for (int hd : {8, 64, 128})
      EXPECT_LE(gpu_vs_plain<float>(DType::F32, {2, group, hd, 16}, {3, 1}, 3, 40, group + hd),
                1e-5)
          << "group " << group << ", head_dim " << hd;
  // Five rows of group 4: 20 query heads per KV head, more than one block's 16.
  EXPECT_LE(gpu_vs_plain<float>(DType::F32, {2, 4, 64, 7}, {5, 2}, 5, 20, 3), 1e-5);
}

// The rows' own pass on a second stream, beside the prefix pass: the same kernels, so the same
// bits. In the simulator a missing fork or join fails the launch that would race (ordering.hpp):
// the second call's own pass would overwrite the partial states the first call's merge reads,
// and the merge would read the own pass's before they were written.
TEST(Ch04SharedPrefixGpu, OwnPassBesideThePrefixPassGivesTheSameBits) {
  KVHEAP_REQUIRE_DEVICE();
  SideStream side;
  const test::SharedPrefixCase<float> fp32({2, 4, 64, 7}, {5, 2}, 5, 20, 3);
  EXPECT_EQ(gpu_vs_plain(DType::F32, fp32, 0, nullptr, &side), gpu_vs_plain(DType::F32, fp32));
  const test::SharedPrefixCase<cpu::BF16Bits> bf16({2, 4, 64, 5}, {9, 7}, 6, 21, 17);
  EXPECT_EQ(gpu_vs_plain(DType::BF16, bf16, 3, nullptr, &side), gpu_vs_plain(DType::BF16, bf16, 3));
  const std::vector<test::PrefixLevel> tree = {{2, 1, {{2, 3, {}}, {1, 2, {}}}}};
  const test::SharedPrefixCase<float> levels({2, 2, 64, 5}, tree, 12, 41);
  EXPECT_EQ(gpu_vs_plain(DType::F32, levels, 0, nullptr, &side), gpu_vs_plain(DType::F32, levels));
}

// Half caches at a head_dim the product does not take: the decode kernel's prefix pass widens
// K and V exactly, as plain attention does, so only the order of the sums differs.
TEST(Ch04SharedPrefixGpu, HalfPrecisionCaches) {
  KVHEAP_REQUIRE_DEVICE();
  EXPECT_LE(gpu_vs_plain<cpu::BF16Bits>(DType::BF16, {2, 4, 32, 16}, {4, 2}, 4, 30, 9), 1e-5);
  EXPECT_LE(gpu_vs_plain<cpu::F16Bits>(DType::F16, {2, 2, 96, 16}, {3}, 3, 30, 10), 1e-5);
}

// The prefix pass as a tensor-core product (fp16 and bf16 at head_dim 64 and 128). It rounds the
// scaled queries and the softmax weights to the cache type, so it is tier 2 against plain
// attention: within 1e-2 relative for bf16 (8 significant bits) and 2e-3 for fp16 (11); the
// largest errors measured over these cases were about a third of that. Cases: every group size
// 1-16; block sizes of 5 and 7 positions, so prefixes (35 to 63 positions) end inside a tile of
// 32; several groups per batch; 9 rows x 16 heads = 144 query rows per KV head, two slices of
// 72; groups of different sizes, whose padding slices return; contexts split in three, with
// splits that start and end inside tiles.
TEST(Ch04SharedPrefixGpu, PrefixPassAsATensorCoreProduct) {
  KVHEAP_REQUIRE_DEVICE();
  if (!cuda::prefix_pass_is_product(DType::BF16, 64))
    GTEST_SKIP() << "the device has no mma.sync.m16n8k16 (compute capability 8.0)";
  struct Case {
    int group, head_dim, block_size;
    std::vector<int> prefixes;
    int members, splits;
    std::vector<int> members_of;
  };
  const std::vector<Case> cases = {
      {1, 64, 5, {9}, 3, 0, {}},     {2, 128, 7, {6, 5}, 2, 0, {}},    {3, 64, 5, {8}, 3, 3, {}},
      {4, 128, 5, {7, 9}, 2, 0, {}}, {6, 64, 7, {5}, 3, 0, {}},        {8, 128, 5, {8}, 2, 0, {}},
      {16, 64, 5, {7}, 9, 0, {}},    {4, 64, 7, {6, 4}, 0, 3, {6, 2}}, {16, 128, 5, {12}, 2, 3, {}},
  };
  const auto bound = [](DType kv) { return kv == DType::BF16 ? 1e-2 : 2e-3; };
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    const test::SharedPrefixShape shape{2, k.group, k.head_dim, k.block_size};
    const auto seed = static_cast<unsigned>(40 + c);
    EXPECT_LE(gpu_vs_plain<cpu::BF16Bits>(DType::BF16, shape, k.prefixes, k.members, 20, seed,
                                          k.splits, k.members_of),
              bound(DType::BF16))
        << "bf16, case " << c;
    EXPECT_LE(gpu_vs_plain<cpu::F16Bits>(DType::F16, shape, k.prefixes, k.members, 20, seed,
                                         k.splits, k.members_of),
              bound(DType::F16))
        << "fp16, case " << c;
  }
}

// A prefix of 2560 positions split across 3 blocks per KV head, then merged: the merge folds the
// prefix's partials before the rows' own (which are split too).
TEST(Ch04SharedPrefixGpu, LongPrefixesSplitAcrossBlocks) {
  KVHEAP_REQUIRE_DEVICE();
  EXPECT_LE(gpu_vs_plain<float>(DType::F32, {2, 4, 64, 16}, {160}, 3, 100, 11, 3), 1e-5);
}

// Groups of different sizes in one batch: the wide rows are padded to the widest group (6 rows x
// 4 heads = 24 per KV head, two 16-head slices), and the smaller group's all-padding slice must
// return without writing anything the merge reads.
TEST(Ch04SharedPrefixGpu, GroupsOfDifferentSizes) {
  KVHEAP_REQUIRE_DEVICE();
  EXPECT_LE(gpu_vs_plain<float>(DType::F32, {2, 4, 64, 16}, {3, 2}, 0, 20, 12, 0, {6, 2}), 1e-5);
}

// The bytes the kernels load, counted by the simulator at every asynchronous copy they make, are
// the bytes the plan says they read: each prefix once per slice of query rows (128 for the
// tensor-core pass, 16 for the decode kernel's), every row's own positions once, and no
// position past a context. Cases: the product at 40 query rows per KV head (one slice) and at
// 144 (two), the decode kernel's pass at 20 (two), and prefixes split in three.
TEST(Ch04SharedPrefixGpu, BytesLoadedAreTheBytesThePlanReads) {
  KVHEAP_REQUIRE_DEVICE();
  if (!is_simulator()) GTEST_SKIP() << "the simulator counts the bytes kernels load";
  BytesRead read;
  (void)gpu_vs_plain<cpu::BF16Bits>(DType::BF16, {2, 8, 64, 5}, {9, 6}, 5, 20, 61, 0, {}, &read);
  EXPECT_GT(read.planned, 0);
  EXPECT_EQ(read.loaded, read.planned) << "bf16, 5 rows x 8 heads";
  (void)gpu_vs_plain<cpu::F16Bits>(DType::F16, {2, 16, 128, 7}, {5}, 9, 20, 62, 3, {}, &read);
  EXPECT_EQ(read.loaded, read.planned) << "fp16, 9 rows x 16 heads, split in three";
  (void)gpu_vs_plain<float>(DType::F32, {2, 4, 64, 16}, {5, 2}, 5, 20, 63, 3, {}, &read);
  EXPECT_EQ(read.loaded, read.planned) << "fp32, 5 rows x 4 heads, the decode kernel's pass";
}

// Trees of shared prefixes (system prompt, documents, questions; depths 1-3 in one batch, rows
// ending at every depth): every level is a prefix pass of its own, over positions that begin
// where its parent's end, and each row merges its path's levels. Both prefix passes: the decode
// kernel's (fp32, and bf16 at head_dim 32) and the tensor-core product's (bf16 and fp16 at 64),
// with contexts split in three; and the bytes the kernels load are still the plan's.
TEST(Ch04SharedPrefixGpu, TreesOfPrefixes) {
  KVHEAP_REQUIRE_DEVICE();
  const std::vector<test::PrefixLevel> trees = {
      {2, 1, {{2, 3, {}}, {1, 2, {}}}},
      {1, 0, {{2, 0, {{1, 2, {}}, {1, 2, {}}}}, {1, 2, {}}}},
      {3, 3, {}},
  };
  BytesRead read;
  const test::SharedPrefixCase<float> f32({2, 4, 64, 5}, trees, 12, 71);
  EXPECT_LE(gpu_vs_plain(DType::F32, f32, 0, &read), 1e-5);
  if (is_simulator()) {
    EXPECT_EQ(read.loaded, read.planned) << "fp32";
  }
  EXPECT_LE(gpu_vs_plain(DType::F32, f32, 3), 1e-5) << "fp32, split in three";
  const test::SharedPrefixCase<cpu::BF16Bits> bf16_32({2, 2, 32, 7}, trees, 12, 72);
  EXPECT_LE(gpu_vs_plain(DType::BF16, bf16_32), 1e-5) << "bf16, head_dim 32";
  if (!cuda::prefix_pass_is_product(DType::BF16, 64)) return;
  const test::SharedPrefixCase<cpu::BF16Bits> bf16({2, 4, 64, 5}, trees, 12, 73);
  EXPECT_LE(gpu_vs_plain(DType::BF16, bf16, 3, &read), 1e-2) << "bf16, product";
  if (is_simulator()) {
    EXPECT_EQ(read.loaded, read.planned) << "bf16, product";
  }
  const test::SharedPrefixCase<cpu::F16Bits> f16({2, 8, 64, 7}, trees, 12, 74);
  EXPECT_LE(gpu_vs_plain(DType::F16, f16), 2e-3) << "fp16, product";
}

/// Chapter 4 over device memory against chapter 3 over device memory, one GpuForward for both.
double gpu_shared_vs_unshared(const ModelWeights& w, DType kv, int block_size,
                              const std::vector<int>& pa, const std::vector<int>& pb, int steps,
                              bool read_once = true) {
  GpuForward fwd(w, kv);
  ch04::SharedCache shared(w.config, kv, 64, block_size, 101, read_once, Memory::kDevice);
  ch03::PagedCache alone(w.config, kv, 64, block_size, 202, Memory::kDevice);
  return test::shared_vs_unshared(fwd, shared, alone, w.config, block_size, pa, pb, steps,
                                  read_once);
}

// Forks and prompts that begin alike over the device cache: copies-on-write are device copies and
// shared prefixes are read once, and the logits are what chapter 3's unshared cache gives.
TEST(Ch04SharedPrefixGpu, SharedLogitsMatchUnsharedTiny) {
  KVHEAP_REQUIRE_DEVICE();
  const ModelWeights w = make_synthetic_weights(preset("tiny"), 4);
  const std::vector<int> pa = {1, 5, 9, 2, 77, 31, 4, 8, 3, 12, 40};
  std::vector<int> pb(pa.begin(), pa.begin() + 8);
  pb.insert(pb.end(), {60, 61, 62});
  for (int bs : {3, 4}) EXPECT_LE(gpu_shared_vs_unshared(w, DType::F32, bs, pa, pb, 8), 1e-5) << bs;
  EXPECT_LE(gpu_shared_vs_unshared(w, DType::F32, 4, pa, pb, 4, /*read_once=*/false), 1e-5);
  EXPECT_LE(gpu_shared_vs_unshared(w, DType::BF16, 4, pa, pb, 4), 1e-5);
}

TEST(Ch04SharedPrefixGpu, SharedLogitsMatchUnsharedStories260K) {
  KVHEAP_REQUIRE_DEVICE();
  KVHEAP_REQUIRE_MODEL(path, "stories260K.bin");
  const ModelWeights w = load_llama2c(path);
  const std::vector<int> pa = {1, 403, 407, 261, 378, 271, 420, 306, 422, 259, 267, 373, 10};
  std::vector<int> pb(pa.begin(), pa.begin() + 9);
  pb.insert(pb.end(), {280, 295});
  EXPECT_LE(gpu_shared_vs_unshared(w, DType::F32, 4, pa, pb, 12), 1e-5);
}

}  // namespace
}  // namespace kvheap
