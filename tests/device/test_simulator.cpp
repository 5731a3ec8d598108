// Tests of the device layer and the CPU simulator: kernels give exact results through shuffles,
// votes, atomics and shared memory; launches are refused where a GPU refuses them; bugs that a
// GPU leaves undefined (divergent barriers, host dereference of device memory, out-of-bounds
// writes) fail loudly in the simulator; copies, events and the GEMM wrapper work. In a real build
// on a machine without a GPU the tests that need one skip; in the simulator build all run.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/half.hpp"
#include "device/buffers.hpp"
#include "device/device.hpp"
#include "device/gemm.hpp"
#include "tests/device/sim_kernels.hpp"
#if defined(KVHEAP_SIM)
#include "device/sim/sim.hpp"
#endif

namespace kvheap {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

#ifndef KVHEAP_REQUIRE_DEVICE  // tests/support/device_test_support.hpp has the same one
#define KVHEAP_REQUIRE_DEVICE()                                                           \
  if (auto why_ = device_unavailable_reason()) {                                          \
    GTEST_SKIP() << *why_ << "; this test runs on a GPU or in the KVHEAP_CUDA=sim build"; \
  }
#endif
#define KVHEAP_REQUIRE_SIMULATOR()                                                            \
  if (!is_simulator()) {                                                                      \
    GTEST_SKIP() << "simulator-only check (on a GPU this bug is undefined behaviour: a hang " \
                    "or silent corruption, not a reportable error)";                          \
  }

// Runs `f`, which must throw LaunchError, and returns the message.
template <class F>
std::string launch_error_of(F f) {
  try {
    f();
  } catch (const LaunchError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a LaunchError";
  return {};
}

#if defined(KVHEAP_SIM)
// More OS threads than this 2-core machine has, so blocks really interleave across threads.
struct SeveralWorkers {
  int saved = sim::worker_threads();
  SeveralWorkers() { sim::set_worker_threads(4); }
  ~SeveralWorkers() { sim::set_worker_threads(saved); }
};
#else
struct SeveralWorkers {};
#endif

TEST(DeviceLayer, QueryReportsTheDevice) {
  KVHEAP_REQUIRE_DEVICE();
  const DeviceInfo info = require_cuda_device();
  EXPECT_GE(device_count(), 1);
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.total_memory, 0u);
  EXPECT_EQ(info.is_simulator, is_simulator());
  if (is_simulator()) {
    EXPECT_EQ(info.name, "kvheap CPU simulator");
  }
}

// require_cuda_device() either returns the device that device_count() reports, or, where there is
// none (a real build on a machine without a GPU), throws a ResourceError that says so.
TEST(DeviceLayer, RequireCudaDeviceAgreesWithDeviceCount) {
  if (device_count() > 0) {
    const DeviceInfo info = require_cuda_device();
    EXPECT_FALSE(info.name.empty());
    EXPECT_GT(info.sm_count, 0);
    EXPECT_EQ(info.is_simulator, is_simulator());
    EXPECT_FALSE(device_unavailable_reason().has_value());
    return;
  }
  try {
    (void)require_cuda_device();
    FAIL() << "require_cuda_device() should throw without a device";
  } catch (const ResourceError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device found: "), std::string::npos) << e.what();
  }
  EXPECT_TRUE(device_unavailable_reason().has_value());
}

TEST(DeviceLayer, CudaCheckNamesTheCallAndPlace) {
  try {
    KVHEAP_CUDA_CHECK(cudaSetDevice(7));
    FAIL() << "device 7 should not exist";
  } catch (const ResourceError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("test_simulator.cpp:"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaSetDevice(7) failed: cudaError"), std::string::npos) << m;
  }
}

TEST(DeviceLayer, ACaughtFailureDoesNotFailTheNextLaunch) {
  KVHEAP_REQUIRE_DEVICE();
  // The runtime keeps an error until it is read, and the launch check reads it: the failed call's
  // error must not resurface there, blamed on an innocent kernel.
  EXPECT_THROW(KVHEAP_CUDA_CHECK(cudaSetDevice(7)), ResourceError);
  DeviceBuffer<float> x(64);
  EXPECT_NO_THROW(test::fill(x.data(), 1.0f, 64, dim3(1), dim3(64)));
  EXPECT_EQ(x.to_host()[63], 1.0f);
}

TEST(DeviceLayer, MemcpyAndMemsetRoundTrip) {
  KVHEAP_REQUIRE_DEVICE();
  std::vector<float> host(1000);
  std::iota(host.begin(), host.end(), -3.5f);
  auto a = DeviceBuffer<float>::from_host(host);
  DeviceBuffer<float> b(host.size());
  KVHEAP_CUDA_CHECK(cudaMemcpy(b.data(), a.data(), a.bytes(), cudaMemcpyDeviceToDevice));
  EXPECT_EQ(b.to_host(), host);

  b.fill_bytes(0);
  EXPECT_EQ(b.to_host(), std::vector<float>(host.size(), 0.0f));
  KVHEAP_CUDA_CHECK(cudaMemset(b.data(), 0xff, 4 * sizeof(float)));  // all-ones bits: NaN
  EXPECT_TRUE(std::isnan(b.to_host()[3]));
  EXPECT_EQ(b.to_host()[4], 0.0f);

  // cudaMemcpyDefault works out the direction; upload/download take offsets.
  std::vector<float> part = {1.0f, 2.0f, 3.0f};
  KVHEAP_CUDA_CHECK(cudaMemcpy(b.data() + 10, part.data(), 3 * sizeof(float), cudaMemcpyDefault));
  std::vector<float> back(3);
  b.download(back, 10);
  EXPECT_EQ(back, part);
  EXPECT_THROW(b.upload(part, host.size() - 2), InputError);

  // Pinned memory through a stream.
  Stream stream;
  PinnedBuffer<float> pinned(host.size());
  KVHEAP_CUDA_CHECK(
      cudaMemcpyAsync(pinned.data(), a.data(), a.bytes(), cudaMemcpyDeviceToHost, stream));
  stream.synchronize();
  EXPECT_EQ(std::vector<float>(pinned.span().begin(), pinned.span().end()), host);
}

TEST(DeviceLayer, EventsMeasureElapsedTime) {
  KVHEAP_REQUIRE_DEVICE();
  Stream stream;
  DeviceBuffer<float> x(1 << 16);
  Event start;
  Event stop;
  start.record(stream);
  test::fill(x.data(), 2.0f, static_cast<int>(x.size()), dim3(64), dim3(256), stream);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop.record(stream);
  const float ms = elapsed_ms(start, stop);
  // The 20 ms are the host's: on a GPU shared with other test processes the start event can be
  // reached late, so the bound leaves room for that. It still tells milliseconds from seconds
  // (0.02) and from microseconds (20000, refused below).
  EXPECT_GE(ms, 5.0f);
  EXPECT_LT(ms, 5000.0f);
  EXPECT_EQ(x.to_host()[12345], 2.0f);
  Event untimed(/*timing=*/false);
  untimed.record(stream);
  EXPECT_THROW((void)elapsed_ms(start, untimed), ResourceError);
}

TEST(SimKernels, BlockSumThroughShufflesIsExact) {
  KVHEAP_REQUIRE_DEVICE();
  const std::vector<dim3> blocks = {dim3(32),   dim3(96),      dim3(256),
                                    dim3(1024), dim3(8, 4, 2), dim3(16, 4, 4)};
  const std::vector<dim3> grids = {dim3(1), dim3(5), dim3(3, 2, 2)};
  for (const dim3 block : blocks) {
    for (const dim3 grid : grids) {
      const std::size_t per_block = block.x * block.y * block.z;
      const std::size_t n_blocks = grid.x * grid.y * grid.z;
      std::vector<long long> values(per_block * n_blocks);
      std::vector<long long> expected(n_blocks, 0);
      for (std::size_t i = 0; i < values.size(); ++i) {
        values[i] = static_cast<long long>(i * 2654435761u % 1000003u) - 500000;
        expected[i / per_block] += values[i];
      }
      auto d_values = DeviceBuffer<long long>::from_host(values);
      DeviceBuffer<long long> d_sums(n_blocks);
      for (const auto how : {test::WarpReduce::Xor, test::WarpReduce::Down}) {
        d_sums.fill_bytes(0);
        test::block_sum(d_values.data(), d_sums.data(), grid, block, how);
        EXPECT_EQ(d_sums.to_host(), expected)
            << "block " << block.x << "x" << block.y << "x" << block.z << ", grid " << grid.x << "x"
            << grid.y << "x" << grid.z << (how == test::WarpReduce::Xor ? ", xor" : ", down");
      }
    }
  }
}

// Threads switch at every barrier and shuffle; each must find its own registers and stack as it
// left them. Computed here for all threads in step, round by round.
TEST(SimKernels, EveryThreadKeepsItsStateAcrossSwitches) {
  KVHEAP_REQUIRE_DEVICE();
  constexpr int kThreads = 1024;
  constexpr int kRounds = 40;
  struct State {
    unsigned long long a, b, c, d, e, f, g, h;
    double x;
  };
  std::vector<State> s(kThreads);
  for (unsigned t = 0; t < kThreads; ++t) {
    s[t] = {t + 1,
            3ull * t + 7,
            t ^ 0x5555u,
            0x9e3779b97f4a7c15ull * t,
            ~0ull - t,
            t << 20,
            11,
            static_cast<unsigned long long>(t) * t,
            static_cast<double>(t)};
  }
  for (int r = 0; r < kRounds; ++r) {
    for (State& v : s) {
      v.a = v.a * 6364136223846793005ull + v.b;
      v.b ^= v.a >> 13;
    }
    std::vector<unsigned> partner(kThreads);  // what lane ^ 1 shuffles over
    for (int t = 0; t < kThreads; ++t) partner[t] = static_cast<unsigned>(s[t ^ 1].a & 0xffff);
    for (int t = 0; t < kThreads; ++t) {
      State& v = s[t];
      v.c += partner[t];
      v.d += v.c ^ (v.e >> 7);
      v.e = v.e * 3 + v.f;
      v.f ^= v.d + v.g;
      v.g += v.h | 1;
      v.h = (v.h >> 3) + v.a;
      v.x += 0.5;
    }
  }
  std::vector<unsigned long long> expected(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    const State& v = s[t];
    expected[t] =
        v.a ^ v.b ^ v.c ^ v.d ^ v.e ^ v.f ^ v.g ^ v.h ^ static_cast<unsigned long long>(2 * v.x);
  }
  DeviceBuffer<unsigned long long> out(kThreads);
  test::carried_state(out.data(), kThreads, kRounds);
  EXPECT_EQ(out.to_host(), expected);
}

TEST(SimKernels, BallotAnyAllFollowLanePredicates) {
  KVHEAP_REQUIRE_DEVICE();
  for (const unsigned threads : {48u, 64u}) {  // 48: a partial second warp
    const int total = static_cast<int>(2 * threads);
    DeviceBuffer<unsigned> ballot(total);
    DeviceBuffer<int> any(total), all_true(total), all_even(total), count(total);
    test::votes(ballot.data(), any.data(), all_true.data(), all_even.data(), count.data(), dim3(2),
                dim3(threads));
    const auto h_ballot = ballot.to_host();
    const auto h_any = any.to_host(), h_all_true = all_true.to_host();
    const auto h_all_even = all_even.to_host(), h_count = count.to_host();
    for (int t = 0; t < total; ++t) {
      const unsigned tid = static_cast<unsigned>(t) % threads;
      const unsigned lanes = std::min(32u, threads - tid / 32 * 32);  // lanes of this warp
      unsigned want = 0;
      for (unsigned l = 0; l < lanes; l += 3) want |= 1u << l;
      EXPECT_EQ(h_ballot[t], want) << "thread " << t;
      EXPECT_EQ(h_any[t], lanes > 5 ? 1 : 0) << "thread " << t;
      EXPECT_NE(h_all_true[t], 0) << "thread " << t;
      EXPECT_EQ(h_all_even[t], 0) << "thread " << t;
      EXPECT_EQ(h_count[t], static_cast<int>(threads / 2)) << "thread " << t;
    }
  }
}

TEST(SimKernels, ShufflesFollowCudaSegmentRules) {
  KVHEAP_REQUIRE_DEVICE();
  struct Case {
    int src, delta, lane_mask, width;
  };
  for (const Case c : {Case{3, 1, 1, 32}, Case{31, 5, 16, 32}, Case{9, 2, 4, 16}, Case{2, 3, 8, 8},
                       Case{0, 1, 2, 4}, Case{7, 4, 16, 16}}) {
    const int threads = 64;
    DeviceBuffer<int> idx(threads), up(threads), down(threads), xr(threads);
    DeviceBuffer<float> half(threads);
    test::shuffles(idx.data(), up.data(), down.data(), xr.data(), half.data(), c.src, c.delta,
                   c.lane_mask, c.width, threads);
    const auto h_idx = idx.to_host(), h_up = up.to_host(), h_down = down.to_host();
    const auto h_xor = xr.to_host();
    const auto h_half = half.to_host();
    auto value = [](int lane) { return 10 * lane + 1; };
    for (int t = 0; t < threads; ++t) {
      // The CUDA programming guide's description of each shuffle, segment by segment.
      const int lane = t % 32, w = c.width, base = lane / w * w;
      const int up_src = lane % w >= c.delta ? lane - c.delta : lane;
      const int down_src = lane % w + c.delta < w ? lane + c.delta : lane;
      const int x = lane ^ c.lane_mask;
      const int xor_src = x / w > lane / w ? lane : x;  // later segments: own value
      const std::string where = "thread " + std::to_string(t) + " width " + std::to_string(w);
      EXPECT_EQ(h_idx[t], value(base + c.src % w)) << where;
      EXPECT_EQ(h_up[t], value(up_src)) << where;
      EXPECT_EQ(h_down[t], value(down_src)) << where;
      EXPECT_EQ(h_xor[t], value(xor_src)) << where;
      EXPECT_EQ(h_half[t], static_cast<float>(lane ^ 1) + 0.5f) << where;
    }
  }
}

TEST(SimKernels, AtomicsAcrossBlocksOnSeveralThreads) {
  KVHEAP_REQUIRE_DEVICE();
  [[maybe_unused]] SeveralWorkers workers;
  const dim3 grid(64), block(256);
  const int n = 64 * 256;
  DeviceBuffer<int> count(1), max_id(1), worker_of_block(64);
  worker_of_block.fill_bytes(0xff);  // -1: no block has started
  DeviceBuffer<unsigned long long> id_sum(1);
  DeviceBuffer<float> float_sum(1);
  DeviceBuffer<unsigned> cas_count(1);
  for (auto* b : {&count, &max_id}) b->fill_bytes(0);
  id_sum.fill_bytes(0);
  float_sum.fill_bytes(0);
  cas_count.fill_bytes(0);
  test::atomics(count.data(), id_sum.data(), float_sum.data(), max_id.data(), cas_count.data(),
                worker_of_block.data(), grid, block);
  EXPECT_EQ(count.to_host()[0], n);
  EXPECT_EQ(id_sum.to_host()[0], static_cast<unsigned long long>(n) * (n - 1) / 2);
  EXPECT_EQ(float_sum.to_host()[0], static_cast<float>(n));  // integers below 2^24: exact
  EXPECT_EQ(max_id.to_host()[0], n - 1);
  EXPECT_EQ(cas_count.to_host()[0], static_cast<unsigned>(n));
  if (is_simulator()) {
    const auto w = worker_of_block.to_host();
    EXPECT_GE(std::set<int>(w.begin(), w.end()).size(), 2u) << "blocks all ran on one OS thread";
  }
}

TEST(SimKernels, StaticSharedMemoryIsPerBlock) {
  KVHEAP_REQUIRE_DEVICE();
  [[maybe_unused]] SeveralWorkers workers;
  for (const dim3 block : {dim3(128), dim3(8, 8, 4), dim3(1024)}) {
    DeviceBuffer<int> errors(1);
    errors.fill_bytes(0);
    test::static_smem(errors.data(), dim3(16, 2), block);
    EXPECT_EQ(errors.to_host()[0], 0) << "block of " << block.x * block.y * block.z;
  }
}

TEST(SimKernels, DynamicSharedMemoryIsPerBlock) {
  KVHEAP_REQUIRE_DEVICE();
  [[maybe_unused]] SeveralWorkers workers;
  // The largest launch a GPU takes without the opt-in attribute: 48 KiB with the static array.
  for (const unsigned bytes : {0u, 4000u, 48u * 1024u - test::kDynamicSmemKernelStaticBytes}) {
    DeviceBuffer<int> errors(1);
    errors.fill_bytes(0);
    test::dynamic_smem(errors.data(), dim3(24), dim3(64), bytes);
    EXPECT_EQ(errors.to_host()[0], 0) << bytes << " bytes";
  }
}

// The asynchronous copy pipeline (cp.async): a batch lands when a wait covers it, the newest
// `prior` batches stay in flight, and a zero-filled tail reads as zeros. On a GPU a copy may
// land before its wait, so what a thread reads before waiting is checked in the simulator only,
// where it must be the stale contents: that is how a missing wait shows up in a kernel's test.
TEST(SimKernels, AsyncCopiesLandWhenAWaitCoversThem) {
  KVHEAP_REQUIRE_DEVICE();
  std::vector<float> src(512);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
  const auto d_src = DeviceBuffer<float>::from_host(src);
  DeviceBuffer<float> before(256), first_only(512), after(512);
  test::async_copy(d_src.data(), before.data(), first_only.data(), after.data());
  const std::vector<float> b = before.to_host(), f = first_only.to_host(), a = after.to_host();
  for (std::size_t i = 0; i < 256; ++i) {
    const bool filled = i % 4 >= 2;  // the second batch's last 8 bytes of each 16
    EXPECT_EQ(a[i], src[i]) << i;
    EXPECT_EQ(a[256 + i], filled ? 0.0f : src[256 + i]) << 256 + i;
    EXPECT_EQ(f[i], src[i]) << "the first batch landed: " << i;
    if (is_simulator()) {
      EXPECT_EQ(b[i], -1.0f) << "read before any wait: " << i;
      EXPECT_EQ(f[256 + i], -1.0f) << "the second batch is still in flight: " << 256 + i;
    }
  }
}

/// D = C + repeat x A B of one m16n8k16 tile on the device, for inputs given as fp32 (rounded to
/// the 16-bit type first), and the same in double on the host: {device, host, sum of |terms|}.
struct MmaResult {
  std::vector<float> d;
  std::vector<double> want, magnitude;
};
MmaResult mma_on_device(bool bf16, const std::vector<float>& a, const std::vector<float>& b,
                        const std::vector<float>& c, int repeat) {
  const auto to_bits = [bf16](const std::vector<float>& x) {
    std::vector<unsigned short> bits(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      bits[i] = bf16 ? float_to_bf16(x[i]) : float_to_fp16(x[i]);
    return bits;
  };
  const auto from_bits = [bf16](unsigned short h) {
    return static_cast<double>(bf16 ? bf16_to_float(h) : fp16_to_float(h));
  };
  const std::vector<unsigned short> ha = to_bits(a), hb = to_bits(b);
  const auto da = DeviceBuffer<unsigned short>::from_host(ha);
  const auto db = DeviceBuffer<unsigned short>::from_host(hb);
  const auto dc = DeviceBuffer<float>::from_host(c);
  DeviceBuffer<float> dd(16 * 8);
  test::mma_tile(bf16, da.data(), db.data(), dc.data(), dd.data(), repeat);
  MmaResult r{dd.to_host(), std::vector<double>(c.begin(), c.end()), {}};
  r.magnitude.assign(16 * 8, 0.0);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double sum = 0, mag = std::abs(c[m * 8 + n]);
      for (int k = 0; k < 16; ++k) {
        const double p = from_bits(ha[m * 16 + k]) * from_bits(hb[k * 8 + n]);
        sum += p;
        mag += repeat * std::abs(p);
      }
      r.want[m * 8 + n] += repeat * sum;
      r.magnitude[m * 8 + n] = mag;
    }
  return r;
}

// The tensor-core product against a plain triple loop, for both input types. Small integers
// make every sum exact whatever order the hardware adds in, so any misplaced element of the
// fragment layout (of A, B or the accumulators) changes a result; random inputs then hold the
// fp32 accumulation to the rounding of its adds. On a GPU the same test checks the layout that
// kernels/mma.cuh and the simulator assume against the instruction itself.
TEST(SimKernels, TensorCoreProductFollowsThePtxLayout) {
  KVHEAP_REQUIRE_DEVICE();
  if (!is_simulator() && device_info().cc_major < 8)
    GTEST_SKIP() << "mma.sync.m16n8k16 needs compute capability 8.0";
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-8, 8);
  std::uniform_real_distribution<float> real(-2.0f, 2.0f);
  for (const bool bf16 : {true, false}) {
    std::vector<float> a(16 * 16), b(16 * 8), c(16 * 8);
    for (float& x : a) x = static_cast<float>(small(rng));
    for (float& x : b) x = static_cast<float>(small(rng));
    for (float& x : c) x = static_cast<float>(small(rng));
    const MmaResult exact = mma_on_device(bf16, a, b, c, 2);
    for (int i = 0; i < 16 * 8; ++i)
      EXPECT_EQ(exact.d[i], exact.want[i])
          << (bf16 ? "bf16" : "fp16") << ", row " << i / 8 << ", column " << i % 8;
    for (float& x : a) x = real(rng);
    for (float& x : b) x = real(rng);
    for (float& x : c) x = real(rng);
    const MmaResult rounded = mma_on_device(bf16, a, b, c, 1);
    for (int i = 0; i < 16 * 8; ++i)
      EXPECT_LE(std::abs(rounded.d[i] - rounded.want[i]), 1e-6 * rounded.magnitude[i])
          << (bf16 ? "bf16" : "fp16") << ", row " << i / 8 << ", column " << i % 8;
  }
}

// ldmatrix against the PTX ISA's description, written out here: lane l's register j holds two
// elements of matrix j, row l / 4 and columns 2 (l % 4), 2 (l % 4) + 1, or, transposed, column
// l / 4 and rows 2 (l % 4), 2 (l % 4) + 1; the lower column (row) in the low half. Every element
// differs, so any misplaced one shows. On a GPU it checks the instruction itself.
TEST(SimKernels, LdmatrixFollowsThePtxLayout) {
  KVHEAP_REQUIRE_DEVICE();
  if (!is_simulator() && device_info().cc_major < 8)
    GTEST_SKIP() << "the kernels use ldmatrix from compute capability 8.0";
  std::vector<unsigned short> in(4 * 8 * 8);
  for (std::size_t e = 0; e < in.size(); ++e) in[e] = static_cast<unsigned short>(1000 + e);
  const auto d_in = DeviceBuffer<unsigned short>::from_host(in);
  DeviceBuffer<unsigned> out(32 * 4);
  for (const bool trans : {false, true}) {
    test::ldmatrix_tile(d_in.data(), out.data(), trans);
    const std::vector<unsigned> got = out.to_host();
    for (int l = 0; l < 32; ++l)
      for (int j = 0; j < 4; ++j) {
        const auto at = [&](int row, int col) {
          return static_cast<unsigned>(in[j * 64 + row * 8 + col]);
        };
        const int a = l / 4, b = 2 * (l % 4);
        const unsigned want = trans ? at(b, a) | at(b + 1, a) << 16 : at(a, b) | at(a, b + 1) << 16;
        EXPECT_EQ(got[l * 4 + j], want)
            << (trans ? "trans, " : "") << "lane " << l << ", matrix " << j;
      }
  }
}

TEST(SimFaults, TensorCoreProductWithoutEveryLaneFailsTheLaunch) {
  KVHEAP_REQUIRE_SIMULATOR();
  DeviceBuffer<unsigned short> a(16 * 16), b(16 * 8);
  DeviceBuffer<float> c(16 * 8), d(16 * 8);
  const std::string m =
      launch_error_of([&] { test::mma_tile(true, a.data(), b.data(), c.data(), d.data(), 1, 30); });
  EXPECT_NE(m.find("mma_tile_kernel"), std::string::npos) << m;
  EXPECT_NE(m.find("lanes 30-31 exited or do not exist"), std::string::npos) << m;
  EXPECT_NE(m.find("device/sim_kernels.cu:"), std::string::npos) << m;
  // Lanes at two different mma call sites make no product: each half waits for the other.
  const std::string two = launch_error_of(
      [&] { test::mma_tile(true, a.data(), b.data(), c.data(), d.data(), 1, 32, true); });
  EXPECT_NE(two.find("deadlock"), std::string::npos) << two;
  EXPECT_NE(two.find("mma.sync.m16n8k16"), std::string::npos) << two;
}

TEST(SimFaults, AsyncCopyNotWaitedForFailsTheLaunch) {
  KVHEAP_REQUIRE_SIMULATOR();
  DeviceBuffer<float> src(4);
  const std::string m = launch_error_of([&] { test::async_copy_left_pending(src.data()); });
  EXPECT_NE(m.find("async_copy_left_pending_kernel failed"), std::string::npos) << m;
  EXPECT_NE(m.find("returned with 1 asynchronous copies not waited for"), std::string::npos) << m;
  EXPECT_NE(m.find("device/sim_kernels.cu:"), std::string::npos) << m;
}

TEST(SimLaunch, RefusesImpossibleShapes) {
  KVHEAP_REQUIRE_DEVICE();
  DeviceBuffer<float> x(64);
  auto fill = [&](dim3 grid, dim3 block) { test::fill(x.data(), 1.0f, 64, grid, block); };
  struct Shape {
    dim3 grid, block;
  };
  for (const Shape bad :
       {Shape{dim3(1), dim3(1025)}, Shape{dim3(1), dim3(32, 32, 2)}, Shape{dim3(0), dim3(32)},
        Shape{dim3(1), dim3(0)}, Shape{dim3(1, 65536), dim3(32)}}) {
    const std::string m = launch_error_of([&] { fill(bad.grid, bad.block); });
    EXPECT_NE(m.find("fill_kernel failed"), std::string::npos) << m;
    // CUDA 13's answer on a real GPU (cudaErrorInvalidValue), and the simulator's.
    EXPECT_NE(m.find("invalid argument"), std::string::npos) << m;
  }
  fill(dim3(2), dim3(1024));  // the largest legal block still runs
  EXPECT_EQ(x.to_host()[63], 1.0f);
}

TEST(SimLaunch, DynamicSharedMemoryOver48KiBNeedsTheAttribute) {
  KVHEAP_REQUIRE_DEVICE();
  DeviceBuffer<int> errors(1);
  errors.fill_bytes(0);
  test::set_big_smem_limit(48 * 1024);  // the default, in case an earlier run raised it
  const std::string m = launch_error_of([&] { test::big_smem(errors.data(), 64 * 1024); });
  EXPECT_NE(m.find("big_smem_kernel failed"), std::string::npos) << m;
  test::set_big_smem_limit(64 * 1024);
  test::big_smem(errors.data(), 64 * 1024);
  EXPECT_EQ(errors.to_host()[0], 0);
  EXPECT_THROW(test::set_big_smem_limit(228 * 1024), ResourceError);  // above any GPU's 227 KiB
}

TEST(SimLaunch, OccupancyFollowsTheLimitsOfAnSm90) {
  KVHEAP_REQUIRE_SIMULATOR();  // on a GPU the answer depends on the kernel's real registers
  // Registers count at the most a thread may have, 255 (64 at 1024 threads): 8 warps per SM.
  EXPECT_EQ(test::fill_blocks_per_sm(32, 0), 8);
  EXPECT_EQ(test::fill_blocks_per_sm(128, 0), 2);
  EXPECT_EQ(test::fill_blocks_per_sm(1024, 0), 1);
  // Shared memory: 40 KiB + the 1 KiB the driver keeps per block, of 228 KiB per SM.
  EXPECT_EQ(test::fill_blocks_per_sm(32, 40 * 1024), 5);
  // More than 48 KiB needs the attribute, as a launch would.
  test::set_big_smem_limit(48 * 1024);
  EXPECT_EQ(test::big_smem_blocks_per_sm(32, 64 * 1024), 0);
  test::set_big_smem_limit(100 * 1024);
  EXPECT_EQ(test::big_smem_blocks_per_sm(32, 100 * 1024), 2);
  test::set_big_smem_limit(48 * 1024);
  EXPECT_THROW(test::fill_blocks_per_sm(2048, 0), ResourceError);  // no such block
}

TEST(SimLaunch, HostPointerArgumentIsRefused) {
  KVHEAP_REQUIRE_SIMULATOR();
  std::vector<float> host(64);
  const std::string m =
      launch_error_of([&] { test::fill(host.data(), 1.0f, 64, dim3(1), dim3(64)); });
  EXPECT_NE(m.find("argument 0"), std::string::npos) << m;
  EXPECT_NE(m.find("is host memory"), std::string::npos) << m;
}

// Work on two streams that nothing orders may overlap on a GPU. The simulator runs it in order
// anyway, so it checks the order a GPU would keep instead: events, host waits, and the default
// stream's implicit order with blocking streams.
TEST(SimStreams, UnorderedWorkOnTwoStreamsIsReported) {
  KVHEAP_REQUIRE_SIMULATOR();
  DeviceBuffer<float> a(64);
  std::vector<float> host(64);
  Stream one, two;
  const auto fill_on = [&](cudaStream_t s, float v) { test::fill(a.data(), v, 64, 1, 64, s); };
  fill_on(one, 1.0f);
  // Write after write.
  std::string m = launch_error_of([&] { fill_on(two, 2.0f); });
  EXPECT_NE(m.find("nothing orders the two"), std::string::npos) << m;
  EXPECT_NE(m.find("argument 0"), std::string::npos) << m;
  // Read after write: a copy out on the second stream.
  EXPECT_EQ(cudaMemcpyAsync(host.data(), a.data(), a.bytes(), cudaMemcpyDeviceToHost, two),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
  // An event orders them, without the host waiting.
  Event written(/*timing=*/false);
  written.record(one);
  written.order_before(two);
  fill_on(two, 2.0f);
  KVHEAP_CUDA_CHECK(cudaMemcpyAsync(host.data(), a.data(), a.bytes(), cudaMemcpyDeviceToHost, two));
  // Write after write: the first stream again, before anything orders it after the second.
  m = launch_error_of([&] { fill_on(one, 3.0f); });
  EXPECT_NE(m.find("wrote, and nothing orders"), std::string::npos) << m;
  // The host waiting for the second stream orders it before everything issued later.
  two.synchronize();
  EXPECT_EQ(host[5], 2.0f);
  fill_on(one, 3.0f);
  // Write after read: a copy out on the second stream, then a write on the first.
  one.synchronize();
  KVHEAP_CUDA_CHECK(cudaMemcpyAsync(host.data(), a.data(), a.bytes(), cudaMemcpyDeviceToHost, two));
  m = launch_error_of([&] { fill_on(one, 3.5f); });
  EXPECT_NE(m.find("which cudaMemcpyAsync on stream #"), std::string::npos) << m;
  EXPECT_NE(m.find("read, and nothing orders"), std::string::npos) << m;
  two.synchronize();
  fill_on(one, 3.5f);
  // The default (legacy) stream waits for blocking streams, and they wait for it.
  fill_on(nullptr, 4.0f);
  fill_on(two, 5.0f);
  // A non-blocking stream is ordered with nothing.
  cudaStream_t apart = nullptr;
  KVHEAP_CUDA_CHECK(cudaStreamCreateWithFlags(&apart, cudaStreamNonBlocking));
  m = launch_error_of([&] { fill_on(apart, 6.0f); });
  EXPECT_NE(m.find("nothing orders the two"), std::string::npos) << m;
  // cudaMemcpy into device memory may return before the copy lands; into host memory it waits.
  DeviceBuffer<float> b(64);
  KVHEAP_CUDA_CHECK(cudaMemcpy(b.data(), a.data(), a.bytes(), cudaMemcpyDeviceToDevice));
  m = launch_error_of([&] { test::fill(b.data(), 7.0f, 64, 1, 64, apart); });
  EXPECT_NE(m.find("which cudaMemcpy on the default stream wrote"), std::string::npos) << m;
  KVHEAP_CUDA_CHECK(cudaMemcpy(host.data(), b.data(), b.bytes(), cudaMemcpyDeviceToHost));
  test::fill(b.data(), 7.0f, 64, 1, 64, apart);
  KVHEAP_CUDA_CHECK(cudaStreamDestroy(apart));
}

TEST(SimMemory, CopiesOutsideTheirAllocationAreRefused) {
  KVHEAP_REQUIRE_SIMULATOR();
  DeviceBuffer<float> small(64);
  std::vector<float> host(100);
  try {
    KVHEAP_CUDA_CHECK(
        cudaMemcpy(small.data(), host.data(), 100 * sizeof(float), cudaMemcpyHostToDevice));
    FAIL() << "an overrunning copy should fail";
  } catch (const ResourceError& e) {
    EXPECT_NE(std::string(e.what()).find("has 256 bytes left in its cudaMalloc block of 256 bytes"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(cudaMemcpy(small.data(), host.data(), 16, cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // reading it cleared it
  std::size_t free_before = 0, free_after = 0, total = 0;
  KVHEAP_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  {
    DeviceBuffer<char> big(1 << 20);
    KVHEAP_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  }
  EXPECT_EQ(free_before - free_after, std::size_t{1} << 20);
  void* p = nullptr;
  KVHEAP_CUDA_CHECK(cudaMalloc(&p, 16));
  KVHEAP_CUDA_CHECK(cudaFree(p));
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // freed twice
}

TEST(SimFaults, DivergentSyncthreadsIsReportedAndTheNextLaunchWorks) {
  KVHEAP_REQUIRE_SIMULATOR();
  DeviceBuffer<int> out(64);
  std::string m = launch_error_of([&] { test::sync_in_first_warp_only(out.data()); });
  EXPECT_NE(m.find("sync_in_first_warp_only_kernel failed"), std::string::npos) << m;
  EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
  EXPECT_NE(m.find("__syncthreads() at device/sim_kernels.cu:"), std::string::npos) << m;
  EXPECT_NE(m.find("reached by threads 0-31 of 64"), std::string::npos) << m;
  EXPECT_NE(m.find("threads 32-63 returned without reaching it"), std::string::npos) << m;

  m = launch_error_of([&] { test::sync_at_two_sites(out.data()); });
  EXPECT_NE(m.find("divergent barrier"), std::string::npos) << m;

  DeviceBuffer<float> x(64);  // the simulator is still usable
  test::fill(x.data(), 3.0f, 64, dim3(1), dim3(64));
  EXPECT_EQ(x.to_host()[0], 3.0f);
}

TEST(SimFaults, MismatchedSyncwarpMasksAreReported) {
  KVHEAP_REQUIRE_SIMULATOR();
  DeviceBuffer<int> out(32);
  std::string m = launch_error_of([&] { test::mismatched_syncwarp(out.data()); });
  EXPECT_NE(m.find("__syncwarp(mask 0xffffffff) at device/sim_kernels.cu:"), std::string::npos)
      << m;
  EXPECT_NE(m.find("lanes 16-31 waiting at __syncthreads()"), std::string::npos) << m;
  m = launch_error_of([&] { test::syncwarp_without_own_lane(out.data()); });
  EXPECT_NE(m.find("which does not include its own lane"), std::string::npos) << m;
}

TEST(SimFaultsDeathTest, HostDereferenceOfDeviceMemoryDies) {
  KVHEAP_REQUIRE_SIMULATOR();
  if (kAsan) {
    GTEST_SKIP() << "under AddressSanitizer device memory is plain malloc memory (so ASan can "
                    "check kernels), which host code can read";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        DeviceBuffer<float> b(1024);
        volatile float v = b.data()[3];
        (void)v;
      },
      "host code dereferenced device memory at 0x[0-9a-f]+ \\(inside a cudaMalloc block of 4096 "
      "bytes");
}

TEST(SimFaultsDeathTest, KernelWritePastEndIsCaught) {
  KVHEAP_REQUIRE_SIMULATOR();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // One float past a 4096-byte block: ASan's redzone, or the simulator's guard page.
  EXPECT_DEATH(
      {
        DeviceBuffer<float> b(1024);
        test::write_past_end(b.data(), 1024, 0);
      },
      kAsan ? "heap-buffer-overflow"
            : "kernel .*write_past_end_kernel accessed 0x[0-9a-f]+, 0 bytes past the end of a "
              "cudaMalloc block of 4096 bytes");
}

class Gemm : public testing::TestWithParam<DType> {};

// Rounds to the operand type and back, so the reference multiplies what the GEMM sees.
float representable(DType t, float x) {
  if (t == DType::F16) return __half2float(__float2half(x));
  if (t == DType::BF16) return __bfloat162float(__float2bfloat16(x));
  return x;
}

template <class T>
void run_gemm(BlasHandle& blas, const std::vector<float>& a, const std::vector<float>& b,
              std::vector<float>& c, GemmShape s, T (*convert)(float)) {
  std::vector<T> ta(a.size()), tb(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ta[i] = convert(a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) tb[i] = convert(b[i]);
  auto da = DeviceBuffer<T>::from_host(ta);
  auto db = DeviceBuffer<T>::from_host(tb);
  DeviceBuffer<float> dc(c.size());
  gemm(blas, da.data(), db.data(), dc.data(), s);
  c = dc.to_host();
}

TEST_P(Gemm, MatchesNaiveLoop) {
  KVHEAP_REQUIRE_DEVICE();
  const DType dtype = GetParam();
  BlasHandle blas;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const int m : {1, 3, 17, 64}) {
    for (const int n : {1, 3, 17, 64}) {
      for (const int k : {1, 3, 17, 64}) {
        std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(n) * k);
        for (float& v : a) v = representable(dtype, dist(rng));
        for (float& v : b) v = representable(dtype, dist(rng));
        std::vector<float> c(static_cast<std::size_t>(m) * n);
        const GemmShape s{m, n, k};
        if (dtype == DType::F32) run_gemm<float>(blas, a, b, c, s, [](float x) { return x; });
        if (dtype == DType::F16)
          run_gemm<__half>(blas, a, b, c, s, [](float x) { return __float2half(x); });
        if (dtype == DType::BF16) {
          run_gemm<__nv_bfloat16>(blas, a, b, c, s, [](float x) { return __float2bfloat16(x); });
        }
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) {
            double ref = 0.0, magnitude = 0.0;
            for (int p = 0; p < k; ++p) {
              const double term = double{a[i * k + p]} * b[j * k + p];
              ref += term;
              magnitude += std::fabs(term);
            }
            // Products of fp16/bf16 inputs are exact in fp32; summing k of them in fp32 errs by
            // at most about k * 2^-24 * sum|a_p b_p|. Allow twice that, whatever the order.
            const double tol = 2.0 * k * std::ldexp(magnitude, -24) + 1e-30;
            EXPECT_NEAR(c[static_cast<std::size_t>(i) * n + j], ref, tol)
                << dtype_name(dtype) << " m=" << m << " n=" << n << " k=" << k << " at " << i << ","
                << j;
          }
        }
      }
    }
  }
  EXPECT_THROW(gemm(blas, dtype, nullptr, nullptr, nullptr, GemmShape{-1, 2, 3}), InputError);
}

INSTANTIATE_TEST_SUITE_P(DTypes, Gemm, testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const testing::TestParamInfo<DType>& p) {
                           return std::string(dtype_name(p.param));
                         });

}  // namespace
}  // namespace kvheap
