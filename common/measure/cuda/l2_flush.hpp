// Evicting a benchmark's data from the GPU's L2 cache between timed calls, leaving it clean.
#pragma once

#include "device/buffers.hpp"
#include "kernels/sample.hpp"

namespace kvheap {

/// \brief Reads a buffer of twice the L2 size on the device, so that a timed kernel that follows
/// finds none of its own data in L2 and no dirty lines either.
///
/// Writing a buffer larger than L2 (a memset) evicts a benchmark's data too, but leaves L2 full of
/// dirty lines, and the timed kernel then pays to write them back while it reads: on an H200,
/// up to 60 MB of writes beside the 134 MB that decode attention reads at batch 1 and 32k
/// positions. A read leaves only clean lines. The read is cuda::sample_rows over the buffer as
/// kRows greedy rows (one block each, across every multiprocessor), a read-only kernel that writes
/// 16 bytes per row; each row holds 0, 1, 2, ..., so each row's greedy token is its last element,
/// which tells a test that every row was read to its end.
class L2Flush {
 public:
  /// \brief Rows the buffer is read as: enough blocks to keep every multiprocessor reading.
  static constexpr int kRows = 1024;

  /// \brief Allocates and fills a buffer of at least 2 x `l2_bytes` (1 MiB when the device reports
  /// no L2, as the simulator does), and reads it once.
  explicit L2Flush(int l2_bytes);

  /// \brief Reads the whole buffer on `stream`.
  void operator()(cudaStream_t stream = nullptr);

  /// \brief Floats in each row of the buffer.
  [[nodiscard]] int row_len() const { return row_len_; }
  /// \brief Bytes the flush reads.
  [[nodiscard]] std::size_t bytes() const { return buffer_.size() * sizeof(float); }
  /// \brief [kRows] each row's greedy token from the last flush: row_len() - 1 when it was read
  /// whole.
  [[nodiscard]] const DeviceBuffer<SampledToken>& last_picks() const { return picks_; }

 private:
  int row_len_;
  DeviceBuffer<float> buffer_;        // [kRows, row_len_]
  DeviceBuffer<SampledToken> picks_;  // [kRows]
};

/// \brief The device's L2 size in bytes, as cudaDevAttrL2CacheSize reports it (0 in the simulator).
int device_l2_bytes();

}  // namespace kvheap
