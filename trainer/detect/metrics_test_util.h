// Torch-free helpers of the metrics tests (boxes_test, ap_test): running a
// Python reference under Debian's python3 and reading its numbers back.
#ifndef ELASTRUN_TRAINER_DETECT_METRICS_TEST_UTIL_H_
#define ELASTRUN_TRAINER_DETECT_METRICS_TEST_UTIL_H_

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "trainer/test_files.h"

namespace elastrun::trainer::detect::testing {

// `values` as a Python list literal that reads back the same doubles.
inline std::string PyList(absl::Span<const double> values) {
  std::vector<std::string> words;
  for (double v : values) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    words.push_back(buf);
  }
  return absl::StrCat("[", absl::StrJoin(words, ","), "]");
}

// Runs `script` under /usr/bin/python3 (Debian's, with numpy, torch and
// torchvision; the first python3 on PATH may lack them) after `import
// sys, math` and `imports`. The script writes its results with
// emit(f, *arrays) to the file open as `f` (sys.argv[1]): one line per
// array (numpy or torch), its values flattened. Returns the lines, or
// nullopt when that python or a module is missing (the caller skips); a
// script that fails otherwise fails the test.
inline std::optional<std::vector<std::vector<double>>> RunPythonReference(
    const std::string& imports, const std::string& script) {
  const std::string dir = elastrun::trainer::testing::TestDir();
  std::ofstream(dir + "/ref.py")
      << "import sys, math\n"
      << imports << "\n"
      << "def emit(f, *arrays):\n"
         "  for a in arrays:\n"
         "    a = a.detach() if hasattr(a, 'detach') else a\n"
         "    f.write(' '.join(repr(float(v)) for v in a.reshape(-1).tolist()) + '\\n')\n"
      << "f = open(sys.argv[1], 'w')\n"
      << script << "\nf.close()\n";
  int status = 0;
  const std::string log = elastrun::trainer::testing::RunCommand(
      "/usr/bin/python3 " + dir + "/ref.py " + dir + "/out.txt", &status);
  if (status != 0) {
    if (log.find("No module named") == std::string::npos &&
        log.find("python3: not found") == std::string::npos) {
      ADD_FAILURE() << "the Python reference failed:\n" << log;
    }
    return std::nullopt;
  }
  std::vector<std::vector<double>> lines;
  std::ifstream in(dir + "/out.txt");
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    lines.emplace_back();
    for (std::string w; words >> w;) lines.back().push_back(std::stod(w));
  }
  return lines;
}

}  // namespace elastrun::trainer::detect::testing

#endif  // ELASTRUN_TRAINER_DETECT_METRICS_TEST_UTIL_H_
