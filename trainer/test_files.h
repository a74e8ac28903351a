// Torch-free helpers shared by the trainer's tests: a scratch folder per
// test in the build tree, a command's output, and a stream's whole text.
#ifndef ELASTRUN_TRAINER_TEST_FILES_H_
#define ELASTRUN_TRAINER_TEST_FILES_H_

#include <cstdio>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace elastrun::trainer::testing {

// A new empty folder for the running test (under the build tree, so
// concurrent checkouts never wipe each other's).
inline std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(ELASTRUN_TRAINER_TEST_DIR) /
                              info->test_suite_name() / info->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Runs `command` through the shell; its stdout and stderr, and in *status
// the wait status.
inline std::string RunCommand(const std::string& command, int* status) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

// Everything written to `f` so far (rewinds it).
inline std::string ReadAll(std::FILE* f) {
  std::rewind(f);
  std::string all;
  char line[1024];
  while (std::fgets(line, sizeof line, f)) all += line;
  return all;
}

}  // namespace elastrun::trainer::testing

#endif  // ELASTRUN_TRAINER_TEST_FILES_H_
