// What a benchmark program reads from its own command line, next to the flags Google Benchmark
// parses: the command as typed (for the tables' "produced by"), the project's own --name=VALUE
// flags, and whether the run only lists the benchmarks.
//
// A listing run (--benchmark_list_tests) runs no benchmark, so it must also skip what surrounds
// them: the peak measurements before, which take seconds, and the tables after, which would be
// empty. Google Benchmark keeps that flag's value private and removes the flag from argv in
// benchmark::Initialize, so listing_only() reads it first, with the library's own rules.
#pragma once

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>

namespace kvheap::bench {

/// \brief The value of `--name=VALUE` among the arguments Google Benchmark left, or `fallback`.
inline std::string flag_value(int argc, char** argv, std::string_view name, std::string fallback) {
  const std::string prefix = fmt::format("--{}=", name);
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.substr(0, prefix.size()) == prefix) return std::string(a.substr(prefix.size()));
  }
  return fallback;
}

/// \brief The command line as typed, program name without its folder: "bench_x --flag=1". Call it
/// before benchmark::Initialize, which removes the flags it knows.
inline std::string command_line(int argc, char** argv) {
  std::string_view prog = argc > 0 ? argv[0] : "";
  const std::size_t slash = prog.rfind('/');
  if (slash != std::string_view::npos) prog.remove_prefix(slash + 1);
  std::string cmd(prog);
  for (int i = 1; i < argc; ++i) cmd += std::string(" ") + argv[i];
  return cmd;
}

/// \brief Whether Google Benchmark reads `value` of a boolean flag as true: empty (the bare flag)
/// is true; one character is true unless it is 0, f, F, n or N (or not a letter or digit); longer
/// values are true unless they are false, no or off in any case.
inline bool truthy_flag_value(std::string_view value) {
  if (value.empty()) return true;
  if (value.size() == 1) {
    const unsigned char v = static_cast<unsigned char>(value[0]);
    return std::isalnum(v) != 0 &&
           std::string_view("0fFnN").find(value[0]) == std::string_view::npos;
  }
  std::string lower(value);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower != "false" && lower != "no" && lower != "off";
}

/// \brief Whether this run only lists the benchmarks, as Google Benchmark will decide: the last
/// --benchmark_list_tests[=VALUE] on the command line, else the environment variable
/// BENCHMARK_LIST_TESTS, else false. Call it before benchmark::Initialize.
inline bool listing_only(int argc, char** argv) {
  constexpr std::string_view kFlag = "--benchmark_list_tests";
  bool listing = false;
  if (const char* env = std::getenv("BENCHMARK_LIST_TESTS")) listing = truthy_flag_value(env);
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == kFlag)
      listing = true;
    else if (a.substr(0, kFlag.size() + 1) == std::string(kFlag) + "=")
      listing = truthy_flag_value(a.substr(kFlag.size() + 1));
  }
  return listing;
}

/// \brief Reads whether the run only lists (listing_only), then lets Google Benchmark take its own
/// flags (benchmark::Initialize); returns the former.
inline bool initialize(int& argc, char** argv) {
  const bool listing = listing_only(argc, argv);
  benchmark::Initialize(&argc, argv);
  return listing;
}

/// \brief Runs the registered benchmarks that the flags select, then ends Google Benchmark.
inline void run_benchmarks() {
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}

/// \brief Lists the registered benchmarks (a listing run of benchmark::RunSpecifiedBenchmarks
/// prints their names and runs none) and returns the program's exit code, 0.
inline int list_benchmarks() {
  run_benchmarks();
  return 0;
}

}  // namespace kvheap::bench
