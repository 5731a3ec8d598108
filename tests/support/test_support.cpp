#include "tests/support/test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

namespace kvheap::test {

std::optional<std::string> model_file(const std::string& name) {
  const char* dir = std::getenv("KVHEAP_MODELS_DIR");
  if (dir == nullptr || *dir == '\0') return std::nullopt;
  std::filesystem::path p = std::filesystem::path(dir) / name;
  if (!std::filesystem::exists(p)) return std::nullopt;
  return p.string();
}

bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && *ci != '\0' && std::string(ci) != "0" && std::string(ci) != "false";
}

double max_rel_diff(std::span<const float> a, std::span<const float> b, double floor) {
  double worst = 0.0;
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const double d = std::fabs(double{a[i]} - double{b[i]});
    worst = std::max(worst, d / std::max(std::fabs(double{b[i]}), floor));
  }
  return a.size() == b.size() ? worst : INFINITY;
}

double rel_inf_error(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - double{b[i]}));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  return scale > 0.0 ? diff / scale : diff;
}

ScopedEnv::ScopedEnv(const char* name, const std::string& value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old;
  setenv(name, value.c_str(), 1);
}

ScopedEnv::~ScopedEnv() {
  if (old_) {
    setenv(name_, old_->c_str(), 1);
  } else {
    unsetenv(name_);
  }
}

}  // namespace kvheap::test
