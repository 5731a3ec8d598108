#include "common/measure/cuda/device_bandwidth.hpp"

#include <algorithm>

#include "device/buffers.hpp"
#include "device/device.hpp"

namespace kvheap {

BandwidthSample measure_copy_bandwidth(std::size_t bytes, int repeats) {
  // Never ask for more than a quarter of the device: the probe must not fail on a small GPU or
  // crowd out a cache that is already allocated.
  const DeviceInfo info = require_cuda_device();
  std::size_t free_bytes = 0, total_bytes = 0;
  KVHEAP_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  bytes = std::min(bytes, free_bytes / 4);
  bytes = bytes / 256 * 256;
  DeviceBuffer<unsigned char> src(bytes), dst(bytes);
  src.fill_bytes(1);
  Stream stream;
  Event start, stop;
  // Untimed copies first, for at least kWarmUpMs: the first touch of fresh allocations costs page
  // mapping, and an idle GPU needs a moment under load to reach its clocks. This is often the
  // first work of the process, and a peak measured low would flatter every fraction of it.
  constexpr double kWarmUpMs = 100.0;
  start.record(stream);
  for (double warm = 0.0; warm < kWarmUpMs;) {
    KVHEAP_CUDA_CHECK(
        cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream));
    stop.record(stream);
    warm = elapsed_ms(start, stop);
  }
  BandwidthSample s;
  s.bytes = bytes;
  s.threads = info.sm_count;
  for (int r = 0; r < repeats; ++r) {
    start.record(stream);
    KVHEAP_CUDA_CHECK(
        cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream));
    stop.record(stream);
    const double ms = elapsed_ms(start, stop);
    if (ms > 0) s.gbps = std::max(s.gbps, 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
  }
  return s;
}

MeasuredPeak gpu_copy_peak() {
  return {measure_copy_bandwidth().gbps, "device-to-device copy", require_cuda_device().l2_bytes};
}

}  // namespace kvheap
