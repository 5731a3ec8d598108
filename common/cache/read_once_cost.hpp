// Whether reading a shared prefix once pays, group by group: a cost model over a plan of shared
// prefixes (chapter 4's plan_shared_prefixes makes them).
//
// Reading a prefix once saves bytes, never arithmetic: its rows still do every multiply-add of
// plain attention, only in one wider pass. So it pays where the bytes cost time and the wider
// pass's loops run about as fast as each row's own. Each group is priced both ways:
//
//   plain      flops / rate(group)       +  r x L x row bytes / read peak
//   read once  flops / rate(r x group)   +      L x row bytes / read peak  +  its partial states
//
// for r rows sharing L positions, `group` query heads per KV head, and rate(k) the measured
// arithmetic rate of the attention loops for k query heads a KV head, on rows in cache. The two
// terms add: the loops run far below the multiply-add peak, so a pass that streams its rows from
// memory stalls on them rather than hiding them under its arithmetic. Where the plan's shared
// positions, all groups together, fit in half the last-level cache, the rows after a group's
// first find them there: plain then pays for the prefix once too.
//
// A group is read once only when that saves at least kReadOnceMargin of its plain time, so that
// near a tie, where the model cannot tell, every row keeps plain attention.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "common/model/model_config.hpp"
#include "kernels/shared_prefix_attention.hpp"

namespace kvheap {

/// \brief The shape of one layer's attention, as the cost model prices it.
struct AttentionDims {
  int n_kv_heads = 0;          ///< KV heads
  int group = 1;               ///< query heads per KV head
  int head_dim = 0;            ///< elements per head
  std::size_t kv_element = 0;  ///< bytes of one cached K or V element
  /// \brief Bytes of K and V of one position, every KV head.
  [[nodiscard]] double position_bytes() const {
    return 2.0 * n_kv_heads * head_dim * static_cast<double>(kv_element);
  }
  /// \brief Multiply-adds (as 2 flops each) one query head spends on one position: q.k and p v.
  [[nodiscard]] double head_flops() const { return 4.0 * head_dim; }
};

/// \brief How fast the machine does what attention does, measured in the same run.
struct AttentionRates {
  double read_bytes_per_s = 0;  ///< the read peak
  double cache_bytes = 0;       ///< the last-level cache (0: unknown, every read from memory)
  /// \brief flops_per_s(k): the arithmetic rate, every thread together, of the loops a pass of k
  /// query heads per KV head runs, on data already in cache.
  std::function<double(int)> flops_per_s;
  double setup_seconds = 0;  ///< what measuring the rates took
};

/// \brief Plain time saved below which a group keeps plain attention.
inline constexpr double kReadOnceMargin = 0.10;

/// \brief One group of a plan, priced both ways (seconds, one layer).
struct GroupPrice {
  int rows = 0;            ///< rows that share the positions
  int begin = 0;           ///< first shared position, after any parent dropped into it
  int positions = 0;       ///< positions shared, likewise
  double plain_s = 0;      ///< every row reading them itself
  double read_once_s = 0;  ///< one pass for all rows, and its partial states
  bool read_once = false;  ///< whether the group was kept
};

/// \brief A plan cut to the groups whose reading once pays, with every group's price.
struct ReadOnceChoice {
  SharedPrefixPlan plan;           ///< the groups kept, in the full plan's order
  std::vector<GroupPrice> prices;  ///< one per group of the full plan, in its order
  /// \brief Groups kept.
  [[nodiscard]] int kept() const { return plan.groups(); }
};

/// \brief The rates of the CPU attention twin for `config`'s heads and a cache of `kv`: the read
/// peak and last-level cache given (MeasuredPeak's gbps and cache_bytes), and the loops' rates,
/// measured here (CpuAttendRates, common/measure/attend_rate.hpp: about 0.1 s).
AttentionRates cpu_attention_rates(const ModelConfig& config, DType kv, double read_gbps,
                                   double cache_bytes);

/// \brief `config`'s heads and a cache of `kv` as the cost model prices them.
AttentionDims attention_dims(const ModelConfig& config, DType kv);

/// \brief Prices `rows` rows of one layer reading `positions` shared positions both ways; with
/// `cached`, rows after the first find the positions in cache.
GroupPrice price_group(int rows, int positions, const AttentionDims& dims,
                       const AttentionRates& rates, bool cached = false);

/// \brief Keeps each group of `plan` (parents first) whose read-once price saves at least
/// kReadOnceMargin of its plain price. A group that is dropped gives its positions to its child
/// groups, which are then priced over both levels; its rows outside them read those positions in
/// their own pass. Every row therefore still attends to every position once.
ReadOnceChoice choose_read_once(const SharedPrefixPlan& plan, const AttentionDims& dims,
                                const AttentionRates& rates);

}  // namespace kvheap
