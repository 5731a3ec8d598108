#include "common/measure/cuda/l2_flush.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include "device/device.hpp"
#include "kernels/sample.hpp"

namespace kvheap {

L2Flush::L2Flush(int l2_bytes)
    : row_len_(
          static_cast<int>((2L * std::max(l2_bytes, 1 << 19) / sizeof(float) + kRows - 1) / kRows)),
      buffer_(static_cast<std::size_t>(kRows) * row_len_),
      picks_(kRows) {
  std::vector<float> row(static_cast<std::size_t>(row_len_));
  std::iota(row.begin(), row.end(), 0.0f);  // exact: row_len_ stays far below 2^24
  std::vector<float> host;
  host.reserve(buffer_.size());
  for (int r = 0; r < kRows; ++r) host.insert(host.end(), row.begin(), row.end());
  buffer_.upload(host);
  (*this)();  // the upload's writes leave L2 once, here, not in the first timed call
  KVHEAP_CUDA_CHECK(cudaDeviceSynchronize());
}

void L2Flush::operator()(cudaStream_t stream) {
  cuda::sample_rows(picks_.data(), buffer_.data(), row_len_, nullptr, kRows, nullptr, 0, nullptr,
                    stream);
}

int device_l2_bytes() {
  int l2_bytes = 0;
  KVHEAP_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0));
  return l2_bytes;
}

}  // namespace kvheap
