// Runs a built kvheap program as a child process and captures what it printed, for CLI tests.
#pragma once

#include <string>
#include <vector>

namespace kvheap::test {

/// \brief The five chapter programs, in ladder order.
inline const std::vector<std::string> kChapterPrograms = {
    "ch01_cpu_reference", "ch02_contiguous_gpu", "ch03_paged_blocks", "ch04_cow_prefix_sharing",
    "ch05_batched_scheduler"};

/// \brief Writes `lines`, one a line, to `path` (a workload or prompts file) and returns the path.
/// Throws when the file cannot be written.
std::string write_lines(const std::string& path, const std::vector<std::string>& lines);

/// \brief What a program printed and how it exited.
struct ProgramResult {
  int exit_code = -1;  ///< exit status, or 128 + signal when it was killed
  std::string out;     ///< standard output
  std::string err;     ///< standard error
};

/// \brief Runs `program` (a target name such as "ch01_cpu_reference", found in KVHEAP_BIN_DIR)
/// with `args`, without a shell, and waits for it. With `stdout_path` its standard output goes
/// to that file instead (/dev/full, say), and `out` stays empty.
ProgramResult run_program(const std::string& program, const std::vector<std::string>& args,
                          const std::string& stdout_path = "");

/// \brief Expects the answer to bad input: one line on stderr that contains `needle`, nothing on
/// stdout.
void expect_one_line_error(const ProgramResult& r, const std::string& needle);

/// \brief Runs `program` on the tiny model once per case of extra flags and expects each run to
/// exit 2 with one line on stderr naming the case's first flag.
void expect_flags_refused(const std::string& program,
                          const std::vector<std::vector<std::string>>& cases);

}  // namespace kvheap::test
