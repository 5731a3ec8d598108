#include "chapters/04_cow_prefix_sharing/admission.hpp"

#include <algorithm>

#include "common/generate.hpp"

namespace kvheap::ch04 {

long common_full_blocks(std::span<const int> a, std::span<const int> b, int block_size) {
  const std::size_t n = std::min(a.size(), b.size());
  std::size_t same = 0;
  while (same < n && a[same] == b[same]) ++same;
  return static_cast<long>(same / block_size);
}

RequestPlan plan_request(std::span<const int> prompt, const std::vector<std::vector<int>>& earlier,
                         int samples, int max_new_tokens, int block_size) {
  const long bs = block_size;
  const long full = static_cast<long>(prompt.size()) / bs;
  const long most = prompt.empty() ? 0 : static_cast<long>(prompt.size() - 1) / bs;
  RequestPlan plan;
  for (const auto& e : earlier)
    plan.reused_blocks = std::max(plan.reused_blocks, common_full_blocks(e, prompt, block_size));
  plan.reused_blocks = std::min(plan.reused_blocks, most);
  const long stored = positions_stored(prompt.size(), max_new_tokens);
  const long per_sample = (stored + bs - 1) / bs - full;
  plan.need = full - plan.reused_blocks + samples * per_sample;
  return plan;
}

}  // namespace kvheap::ch04
