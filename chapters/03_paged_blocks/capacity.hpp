// Capacity at a fixed KV budget: how many requests each policy admits, and what it wastes.
#pragma once

#include <cstdint>
#include <vector>

#include "common/model/model_config.hpp"

namespace kvheap::ch03 {

/// \brief Request lengths (prompt + generation, in tokens) drawn from a lognormal distribution
/// with the given mean and sigma of the underlying normal, clipped to [1, max_len];
/// deterministic for a seed. Throws UsageError for a negative count, a mean or sigma that is not
/// finite and positive, or max_len < 1.
std::vector<int> lognormal_lengths(int count, double mean, double sigma, int max_len,
                                   std::uint64_t seed);

/// \brief Outcome of admitting requests in order until the budget is full.
struct CapacityResult {
  int admitted_contiguous = 0;    ///< each reserves max_len tokens
  int admitted_paged = 0;         ///< each takes ceil(len / block_size) blocks from a BlockManager
  double waste_contiguous = 0.0;  ///< 1 - tokens / reserved slots, over admitted requests
  double waste_paged = 0.0;       ///< 1 - tokens / slots of the blocks held
};

/// \brief Admits `lengths` in order into `budget_bytes` of KV under both policies.
CapacityResult admit_until_full(const ModelConfig& c, DType kv, std::size_t budget_bytes,
                                int block_size, int max_len, const std::vector<int>& lengths);

}  // namespace kvheap::ch03
