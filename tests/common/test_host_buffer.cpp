// HostBuffer, the KV storage of the CPU caches: zero-filled, aligned as promised, owned.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "base/error.hpp"
#include "common/util/host_buffer.hpp"

namespace kvheap {
namespace {

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(HostBuffer, IsZeroFilledAndSizedAsAsked) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4097}, std::size_t{3} << 20}) {
    HostBuffer b(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), bytes);
    for (std::size_t i = 0; i < bytes; i += 511) ASSERT_EQ(b.data()[i], 0) << "byte " << i;
    EXPECT_EQ(b.data()[bytes - 1], 0);
    b.data()[bytes - 1] = 7;  // the last byte asked for is ours to write
  }
}

TEST(HostBuffer, LargeBuffersStartOnAHugePageSmallOnesOnACacheLine) {
  const HostBuffer large(std::size_t{5} << 20);
  EXPECT_EQ(address(large.data()) % (std::size_t{2} << 20), 0u);
  const HostBuffer small(1000);
  EXPECT_EQ(address(small.data()) % 64, 0u);
  const HostBuffer plain(std::size_t{5} << 20, PageSize::kSmall);
  EXPECT_EQ(address(plain.data()) % 64, 0u);
}

// A size the allocator cannot give is a ResourceError naming it in MB (exit 1 in the programs),
// not a crash. AddressSanitizer's allocator aborts on such a request instead of returning null,
// so the sanitizer build skips this test; the others run it.
TEST(HostBuffer, AnAllocationThatFailsIsAResourceErrorNamingTheSize) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer aborts on an allocation it cannot serve";
#else
  try {
    const HostBuffer huge(std::size_t{1} << 62);
    FAIL() << "4.6e18 bytes were allocated";
  } catch (const ResourceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot allocate 4.61169e+12 MB of host memory"), std::string::npos)
        << what;
  }
#endif
}

TEST(HostBuffer, EmptyHoldsNothingAndMovesTransferOwnership) {
  const HostBuffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);

  HostBuffer a(std::size_t{3} << 20);
  a.as<float>()[10] = 1.5f;
  const unsigned char* where = a.data();
  HostBuffer b = std::move(a);
  EXPECT_EQ(b.data(), where);
  EXPECT_EQ(b.as<float>()[10], 1.5f);
  EXPECT_EQ(a.data(),
            nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  EXPECT_EQ(a.size(), 0u);
  a = HostBuffer(16);  // and it can be assigned again
  EXPECT_EQ(a.size(), 16u);
}

}  // namespace
}  // namespace kvheap
