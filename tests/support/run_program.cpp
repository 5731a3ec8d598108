#include "tests/support/run_program.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace kvheap::test {

void expect_one_line_error(const ProgramResult& r, const std::string& needle) {
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr: " << r.err;
  EXPECT_TRUE(r.out.empty()) << "stdout: " << r.out;
}

void expect_flags_refused(const std::string& program,
                          const std::vector<std::vector<std::string>>& cases) {
  for (const std::vector<std::string>& extra : cases) {
    std::vector<std::string> args = {"--model", "tiny", "--no-peak"};
    args.insert(args.end(), extra.begin(), extra.end());
    const ProgramResult r = run_program(program, args);
    EXPECT_EQ(r.exit_code, 2) << extra[0] << " " << extra[1];
    expect_one_line_error(r, extra[0]);
  }
}

namespace {
std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

ProgramResult run_program(const std::string& program, const std::vector<std::string>& args,
                          const std::string& stdout_path) {
  const char* bin_dir = std::getenv("KVHEAP_BIN_DIR");
  if (bin_dir == nullptr) throw std::runtime_error("KVHEAP_BIN_DIR is not set (ctest sets it)");
  // Lexically normal, so that "../bench/x" needs no bin/ folder to pass through.
  const std::string exe = (std::filesystem::path(bin_dir) / program).lexically_normal().string();
  const auto tmp = std::filesystem::temp_directory_path();
  const std::string stem = "kvheap_cli_" + std::to_string(getpid()) + "_";
  const std::string out_path = (tmp / (stem + "out")).string();
  const std::string err_path = (tmp / (stem + "err")).string();

  std::vector<std::string> argv_s = {exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (stdout_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  } else {
    posix_spawn_file_actions_addopen(&fa, 1, stdout_path.c_str(), O_WRONLY, 0);
  }
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot start " + exe);
  int status = 0;
  waitpid(pid, &status, 0);
  ProgramResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (stdout_path.empty()) r.out = slurp(out_path);
  r.err = slurp(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return r;
}

std::string write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream f(path);
  for (const std::string& line : lines) f << line << "\n";
  f.close();
  if (!f) throw std::runtime_error("cannot write " + path);
  return path;
}

}  // namespace kvheap::test
