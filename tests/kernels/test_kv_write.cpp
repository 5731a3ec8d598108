// The KV write kernel stores exactly the bits of its CPU twin, cpu::kv_write: the same rows, the
// same round-to-nearest-even narrowing (ties, fp16 overflow and subnormals included), and no
// write outside the destination rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "common/model/model_config.hpp"
#include "kernels/kv_write.hpp"
#include "tests/support/device_test_support.hpp"

namespace kvheap {
namespace {

TEST(KvWrite, EqualsCpuTwinBitwise) {
  KVHEAP_REQUIRE_DEVICE();
  struct Shape {
    int n, kv_dim;
  };
  // kv_dim 40: one partial warp per row; 1000: several strides, and not a multiple of 8.
  for (const Shape s : {Shape{5, 40}, Shape{3, 1000}}) {
    const int rows = 16;
    std::vector<float> k(static_cast<std::size_t>(s.n) * s.kv_dim), v(k.size());
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 100.0f);
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng) * 1e-3f;
    // Rounding edge cases: fp16's largest value and overflow threshold, values that are
    // subnormal in fp16 or flush to zero, exact ties of fp16 (2^-11) and bf16 (2^-8) at 1.0.
    const float edges[] = {65504.0f,
                           65519.0f,
                           65520.0f,
                           -1e6f,
                           3e-8f,
                           -6e-6f,
                           1e-40f,
                           1.0f + 0x1p-11f,
                           1.0f + 3 * 0x1p-11f,
                           1.0f + 0x1p-8f,
                           1.0f + 3 * 0x1p-8f,
                           -0.0f};
    std::copy(std::begin(edges), std::end(edges), k.begin());
    const std::vector<std::int64_t> dst = {9, 2, 15, 0, 7};  // unordered cache rows
    for (DType kv : {DType::F32, DType::F16, DType::BF16}) {
      const std::size_t bytes = static_cast<std::size_t>(rows) * s.kv_dim * dtype_size(kv);
      const std::vector<unsigned char> poison(bytes, 0xab);  // rows not written keep this
      std::vector<unsigned char> want_k = poison, want_v = poison;
      cpu::kv_write(kv, want_k.data(), want_v.data(), k.data(), v.data(), dst.data(), s.n,
                    s.kv_dim);
      auto dk = DeviceBuffer<unsigned char>::from_host(poison);
      auto dv = DeviceBuffer<unsigned char>::from_host(poison);
      const auto dkf = DeviceBuffer<float>::from_host(k);
      const auto dvf = DeviceBuffer<float>::from_host(v);
      const auto ddst = DeviceBuffer<std::int64_t>::from_host(dst);
      cuda::kv_write(kv, dk.data(), dv.data(), dkf.data(), dvf.data(), ddst.data(), s.n, s.kv_dim);
      EXPECT_EQ(dk.to_host(), want_k) << dtype_name(kv) << " kv_dim " << s.kv_dim;
      EXPECT_EQ(dv.to_host(), want_v) << dtype_name(kv) << " kv_dim " << s.kv_dim;
    }
  }
}

}  // namespace
}  // namespace kvheap
