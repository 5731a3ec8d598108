#include "common/measure/working_set.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace kvheap {

std::size_t read_probe_default_bytes(std::size_t llc, std::size_t memory) {
  const std::size_t cap = std::max(std::size_t{1} << 30, memory / 8);
  return std::clamp<std::size_t>(8 * llc, std::size_t{256} << 20, cap);
}

std::string ColdSetWindow::skip_reason(const std::string& name, std::size_t set,
                                       std::size_t allocated) const {
  if (max < min)
    return fmt::format(
        "{}: skipped, this host's memory cannot hold a working set of 4 x LLC = {} MiB", name,
        min >> 20);
  if (set < min || set > max)
    return fmt::format("{}: skipped, K+V working set {} MiB is outside [4 x LLC = {} MiB, {} MiB]",
                       name, set >> 20, min >> 20, max >> 20);
  if (allocation_cap > 0 && allocated > allocation_cap)
    return fmt::format("{}: skipped, it allocates {} MiB, more than half of this host's memory",
                       name, allocated >> 20);
  return {};
}

bool ColdSetWindow::admits(const std::string& name, std::size_t set, std::size_t allocated) const {
  const std::string reason = skip_reason(name, set, allocated);
  if (!reason.empty()) fmt::print(stderr, "{}\n", reason);
  return reason.empty();
}

ColdSetWindow cold_set_window(std::size_t cap, std::size_t llc, std::size_t memory) {
  const std::size_t floor = 4 * (llc > 0 ? llc : std::size_t{32} << 20);
  std::size_t top = std::max(cap, 2 * floor);
  if (memory > 0) top = std::min(top, memory / 8);
  return {floor, top, memory / 2};
}

}  // namespace kvheap
