// Benchmarks that fail must say so in their exit status. Google Benchmark exits 0 after a
// benchmark skipped with an error, so a script running them (scripts/gpu-check.sh) would read a
// refused configuration or a wrong answer as success.
#pragma once

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdio>
#include <string>

namespace kvheap::bench {

/// \brief Whether a benchmark of this process has failed (fail()).
inline bool g_failed = false;

/// \brief Skips the running benchmark with `why`, as state.SkipWithError does, and remembers it for
/// exit_status().
inline void fail(benchmark::State& state, const std::string& why) {
  g_failed = true;
  state.SkipWithError(why.c_str());
}

/// \brief The program's exit status: `status` when no benchmark failed, else 1, after a line
/// saying so on stderr.
inline int exit_status(const char* program, int status = 0) {
  if (!g_failed) return status;
  fmt::print(stderr, "{}: a benchmark failed (its error is in the report above)\n", program);
  return 1;
}

}  // namespace kvheap::bench
