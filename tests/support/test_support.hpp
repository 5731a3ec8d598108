// Helpers shared by the test files: where the real checkpoints are, and relative comparisons.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "base/error.hpp"

namespace kvheap::test {

/// \brief Directory holding stories260K.bin and tokenizer.bin, from KVHEAP_MODELS_DIR.
///
/// Returns nullopt when it is unset or missing the file; callers then skip with
/// KVHEAP_REQUIRE_MODEL. Under CI (CI=true) a missing model is a failure, never a skip.
std::optional<std::string> model_file(const std::string& name);

/// \brief Largest |a-b| / max(|b|, floor) over two equal-length arrays (element-wise).
double max_rel_diff(std::span<const float> a, std::span<const float> b, double floor = 1.0);

/// \brief max|a-b| / max|b|: the error relative to the reference vector's scale (infinity norm).
///
/// This is what "logits within relative 1e-5" means in kvheap's tests: a logit near zero may
/// differ by rounding of the large ones it was computed alongside, so its own magnitude is not
/// the right yardstick. Infinity when the sizes differ.
double rel_inf_error(std::span<const float> a, std::span<const float> b);

/// \brief Expects `fn` to throw an `E` whose message contains every one of `parts`.
template <typename E, typename Fn>
void expect_error_mentioning(Fn&& fn, std::initializer_list<std::string_view> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    for (const auto part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' missing from: " << e.what();
    }
  }
}

/// \brief expect_error_mentioning for the InputError that bad input gets.
template <typename Fn>
void expect_input_error(Fn&& fn, std::initializer_list<std::string_view> parts) {
  expect_error_mentioning<InputError>(std::forward<Fn>(fn), parts);
}

}  // namespace kvheap::test

/// Binds `var` to the path of a file in KVHEAP_MODELS_DIR, or skips (fails under CI=true).
#define KVHEAP_REQUIRE_MODEL(var, name)                                                            \
  std::string var; /* NOLINT(bugprone-macro-parentheses): a declaration */                         \
  if (auto p_ = ::kvheap::test::model_file(name)) {                                                \
    var = *p_;                                                                                     \
  } else if (::kvheap::test::running_in_ci()) {                                                    \
    FAIL() << "KVHEAP_MODELS_DIR must point at a folder with " << (name)                           \
           << " in CI; tests that need a real checkpoint may not skip there";                      \
  } else {                                                                                         \
    GTEST_SKIP() << "set KVHEAP_MODELS_DIR to a folder holding " << (name) << " to run this test"; \
  }

namespace kvheap::test {
/// \brief True when the CI environment variable is set to a true value.
bool running_in_ci();

/// \brief Sets an environment variable for a scope (and for the programs a test runs meanwhile)
/// and puts the old value back.
class ScopedEnv {
 public:
  /// \brief Sets `name` to `value` until destruction.
  ScopedEnv(const char* name, const std::string& value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};
}  // namespace kvheap::test
