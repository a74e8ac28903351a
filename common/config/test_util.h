// Helpers for the config tests: files in a fresh temporary folder, and
// matchers on error messages.
#ifndef ELASTRUN_COMMON_CONFIG_TEST_UTIL_H_
#define ELASTRUN_COMMON_CONFIG_TEST_UTIL_H_

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::config::testing {

// A folder unique to the running test, created empty.
inline std::string TestDir() {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                              "elastrun_config" / info->test_suite_name() /
                              info->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Writes `content` to `dir`/`name` (creating folders) and returns the path.
inline std::string WriteFile(const std::string& dir, const std::string& name,
                             const std::string& content) {
  std::filesystem::path path = std::filesystem::path(dir) / name;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << content;
  return path.string();
}

// The error message of a failed StatusOr/Status ("" if it succeeded, so a
// HasSubstr check fails visibly).
template <typename T>
std::string ErrorOf(const absl::StatusOr<T>& s) {
  return s.ok() ? std::string("<ok>") : std::string(s.status().message());
}
inline std::string ErrorOf(const absl::Status& s) {
  return s.ok() ? std::string("<ok>") : std::string(s.message());
}

}  // namespace elastrun::config::testing

#endif  // ELASTRUN_COMMON_CONFIG_TEST_UTIL_H_
