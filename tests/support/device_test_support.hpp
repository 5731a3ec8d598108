// Helpers for tests of device code (kernels, the GPU forward pass): skipping without a device,
// moving vectors to and from device memory, and llm.c-style comparisons that show the first
// mismatching elements.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <span>
#include <sstream>
#include <vector>

#include "device/buffers.hpp"
#include "device/device.hpp"
#include "tests/support/test_support.hpp"

/// Skips the test, saying why, when there is no CUDA device: a real build on a machine without
/// a GPU. The simulator build always has its device.
#define KVHEAP_REQUIRE_DEVICE()                                                            \
  if (auto why_ = ::kvheap::device_unavailable_reason()) {                                 \
    GTEST_SKIP() << *why_ << "; these tests run on a GPU or in the KVHEAP_CUDA=sim build"; \
  }

namespace kvheap::test {

/// \brief A device copy of `host`.
template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  return DeviceBuffer<T>::from_host(std::span<const T>(host));
}

/// \brief Passes when rel_inf_error(got, want) <= tol (max|got - want| / max|want|) and NaNs sit
/// in the same places; otherwise lists the first ten elements whose error exceeds
/// tol * max|want|, as llm.c's checks do.
inline ::testing::AssertionResult rel_close(std::span<const float> got, std::span<const float> want,
                                            double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  // rel_inf_error's std::max skips NaNs, so they are counted separately.
  bool nan_mismatch = false;
  for (std::size_t i = 0; i < got.size(); ++i)
    nan_mismatch = nan_mismatch || std::isnan(got[i]) != std::isnan(want[i]);
  const double err = rel_inf_error(got, want);
  if (err <= tol && !nan_mismatch) return ::testing::AssertionSuccess();
  double scale = 0.0;
  for (float w : want) scale = std::fmax(scale, std::fabs(w));
  std::ostringstream msg;
  msg << "relative error " << err << " > " << tol << " (scale " << scale << ")";
  int shown = 0;
  for (std::size_t i = 0; i < got.size() && shown < 10; ++i) {
    if (std::fabs(static_cast<double>(got[i]) - want[i]) > tol * scale ||
        std::isnan(got[i]) != std::isnan(want[i])) {
      msg << "\n  [" << i << "] got " << got[i] << ", want " << want[i];
      ++shown;
    }
  }
  return ::testing::AssertionFailure() << msg.str();
}

}  // namespace kvheap::test
