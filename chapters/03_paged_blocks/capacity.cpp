#include "chapters/03_paged_blocks/capacity.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.hpp"
#include "chapters/03_paged_blocks/block_manager.hpp"
#include "common/program/kv_budget.hpp"

namespace kvheap::ch03 {

std::vector<int> lognormal_lengths(int count, double mean, double sigma, int max_len,
                                   std::uint64_t seed) {
  // std::lognormal_distribution needs sigma > 0, and infinities would reach lround as NaN.
  if (count < 0 || !(mean > 0.0 && std::isfinite(mean)) || !(sigma > 0.0 && std::isfinite(sigma)) ||
      max_len < 1)
    throw UsageError(fmt::format(
        "lognormal lengths need count >= 0, a finite mean > 0, a finite sigma > 0 and max_len >= "
        "1; got count {}, mean {}, sigma {}, max_len {}",
        count, mean, sigma, max_len));
  // E[lognormal(mu, sigma)] = exp(mu + sigma^2 / 2): pick mu so the mean is `mean`.
  const double mu = std::log(mean) - sigma * sigma / 2.0;
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> dist(mu, sigma);
  std::vector<int> out(count);
  // Clipped as a double, so that a draw from the far tail cannot overflow the conversion to int.
  for (int& len : out)
    len = static_cast<int>(std::lround(std::clamp(dist(rng), 1.0, static_cast<double>(max_len))));
  return out;
}

CapacityResult admit_until_full(const ModelConfig& c, DType kv, std::size_t budget_bytes,
                                int block_size, int max_len, const std::vector<int>& lengths) {
  if (max_len < 1)
    throw UsageError(fmt::format("the longest request must be at least 1 token, got {}", max_len));
  CapacityResult r;
  const std::size_t per_token = kv_bytes_per_token(c, kv);
  // Contiguous: every request reserves max_len positions, whatever it needs.
  const std::size_t slots = budget_bytes / (per_token * static_cast<std::size_t>(max_len));
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < lengths.size() && i < slots; ++i, ++r.admitted_contiguous)
    tokens += lengths[i];
  r.waste_contiguous = r.admitted_contiguous > 0
                           ? 1.0 - static_cast<double>(tokens) /
                                       (static_cast<double>(r.admitted_contiguous) * max_len)
                           : 0.0;
  // Paged: real allocations from a pool of the same size, in arrival order, until one fails.
  BlockManager m(blocks_for_budget(c, kv, budget_bytes, block_size), block_size, 1);
  for (int len : lengths) {
    if (!m.can_allocate(len)) break;
    const int seq = m.allocate(len);
    for (int t = 0; t < len; ++t) (void)m.append_slot(seq);
    ++r.admitted_paged;
  }
  r.waste_paged = m.slots_held() > 0 ? 1.0 - static_cast<double>(m.tokens_held()) /
                                                 static_cast<double>(m.slots_held())
                                     : 0.0;
  return r;
}

}  // namespace kvheap::ch03
