// The arithmetic rate of the CPU attention loops: what a cost model divides a pass's flops by
// where the peaks alone would mislead. On a few cores plain decode attention is as bound by its
// multiply-adds, at a fraction of the FMA peak, as by its bytes, so the loops' own pace decides
// whether reading fewer bytes makes a pass faster.
#pragma once

#include <map>

#include "base/dtype.hpp"

namespace kvheap {

/// \brief The rate of the CPU twin's attention loops over a span of cached rows, by the number of
/// query heads per KV head: the loops the prefix pass of shared-prefix attention
/// (cpu::attend_batch_shared_prefix) runs for that many heads, over positions that stay in cache,
/// on every OpenMP thread at once.
///
/// All of it is measured at construction, so that no pass pays for it later: the width of a
/// plain row (`group`), and each power of two from 2 to kMostHeads. Other widths take the rate of
/// the power of two below them (2 for a width of 1 that is not `group`), which runs the same
/// loops (cpu::kProductFrom, where the loops change, is a power of two).
class CpuAttendRates {
 public:
  /// \brief Widest pass measured; wider ones take its rate.
  static constexpr int kMostHeads = 256;
  /// \brief Measures the rates for a cache of `n_kv_heads` x `head_dim` in `kv` whose rows have
  /// `group` query heads per KV head: each the best of three timed runs of about a millisecond.
  CpuAttendRates(int n_kv_heads, int head_dim, DType kv, int group);
  /// \brief FLOP/s (a multiply-add is 2) for `heads` query heads per KV head.
  [[nodiscard]] double flops_per_s(int heads) const;
  /// \brief The widths measured, each with its rate.
  [[nodiscard]] const std::map<int, double>& measured() const { return measured_; }
  /// \brief Seconds the construction took.
  [[nodiscard]] double seconds() const { return seconds_; }

 private:
  int group_;
  std::map<int, double> measured_;
  double seconds_ = 0;
};

}  // namespace kvheap
