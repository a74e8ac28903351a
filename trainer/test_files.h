// Torch-free helpers shared by the trainer's tests: a scratch folder per
// test in the build tree, a command's output, and a stream's whole text.
#ifndef ELASTRUN_TRAINER_TEST_FILES_H_
#define ELASTRUN_TRAINER_TEST_FILES_H_

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

// What python3's XML parser reads in an SVG: how many `element`s it has
// and its texts.
struct ParsedSvg {
  int count = 0;
  std::vector<std::string> texts;
};

// Parses `svg` (written to dir/in.svg) with xml.etree, counting `element`
// ("polyline", "circle"); a document that is not well-formed fails the
// test. nullopt without python3.
inline std::optional<ParsedSvg> ParseSvg(const std::string& dir, const std::string& svg,
                                         const std::string& element) {
  std::ofstream(dir + "/in.svg") << svg;
  std::ofstream(dir + "/parse.py") << R"(import sys, xml.etree.ElementTree as ET
ns = '{http://www.w3.org/2000/svg}'
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == ns + 'svg', root.tag
print(len(root.findall('.//' + ns + sys.argv[2])))
for t in root.iter(ns + 'text'):
  print(t.text)
)";
  int status = 0;
  const std::string out = RunCommand(
      absl::StrCat("python3 ", dir, "/parse.py ", dir, "/in.svg ", element), &status);
  if (status != 0 && out.find("not found") != std::string::npos) return std::nullopt;
  EXPECT_EQ(status, 0) << "not well-formed XML:\n" << out;
  if (status != 0) return ParsedSvg{};
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ParsedSvg parsed;
  if (lines.empty()) return parsed;
  parsed.count = std::stoi(lines[0]);
  parsed.texts.assign(lines.begin() + 1, lines.end());
  return parsed;
}

}  // namespace elastrun::trainer::testing

#endif  // ELASTRUN_TRAINER_TEST_FILES_H_
