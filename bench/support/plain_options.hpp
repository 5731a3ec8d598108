// Options the plain (non-Google-Benchmark) CPU benchmark programs share: lists of counts and the
// seconds of repeats per measurement, each checked with a message naming the flag.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "common/program/token_ids.hpp"

namespace kvheap::bench {

/// \brief The comma-separated counts of `flag`, parsed as token ids are, each from `lowest` to
/// 4096; a value outside is refused by name.
inline std::vector<int> counts_option(const std::string& list, const char* flag, int lowest) {
  const std::vector<int> v = parse_token_ids(list, 4097, flag);
  if (std::any_of(v.begin(), v.end(), [&](int c) { return c < lowest; }))
    throw UsageError(fmt::format("{}: a count is from {} to 4096", flag, lowest));
  return v;
}

/// \brief Refuses a --min-time outside 0-60 seconds.
inline void check_min_time(double seconds) {
  if (!(seconds >= 0.0 && seconds <= 60.0))
    throw UsageError(fmt::format("--min-time {}: expected seconds from 0 to 60", seconds));
}

}  // namespace kvheap::bench
