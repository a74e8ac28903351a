// Test helpers for end-to-end training tests: the trainer's sample logs
// (trainer.h, RunOptions::sample_log) and killing a "node" (a launcher or a
// daemon with its workers) as a machine that loses power. Header-only.
#ifndef ELASTRUN_TESTS_TESTING_TRAINING_H_
#define ELASTRUN_TESTS_TESTING_TRAINING_H_

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun::testing {

// One line of a sample log: "<attempt> <epoch> <iteration> <sample>...";
// epochs and iterations counted from 0.
struct SampleLine {
  int64_t attempt = -1, epoch = -1, iteration = -1;
  std::vector<int64_t> samples;
};

// The complete lines of a sample log (a line still being written, read
// while training goes on, is left out).
inline std::vector<SampleLine> ParseSampleLog(const std::string& text) {
  std::vector<SampleLine> lines;
  const absl::string_view whole(text.data(), text.rfind('\n') + 1);
  for (absl::string_view l : absl::StrSplit(whole, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(l, ' ');
    SampleLine s;
    if (f.size() < 3 || !absl::SimpleAtoi(f[0], &s.attempt) ||
        !absl::SimpleAtoi(f[1], &s.epoch) || !absl::SimpleAtoi(f[2], &s.iteration)) {
      ADD_FAILURE() << "bad sample log line: " << l;
      continue;
    }
    for (size_t k = 3; k < f.size(); ++k) {
      int64_t v = 0;
      if (absl::SimpleAtoi(f[k], &v)) s.samples.push_back(v);
    }
    lines.push_back(std::move(s));
  }
  return lines;
}

// Pids whose parent is `parent` (from /proc: a launcher's workers).
inline std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  for (const std::string& name : ListFiles("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(name, &pid)) continue;
    const std::string stat = ReadFile(absl::StrCat("/proc/", name, "/stat"));
    // "pid (comm) state ppid ...": comm may hold spaces, so parse after ')'.
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 1));
    std::string state;
    pid_t ppid = 0;
    if (rest >> state >> ppid && ppid == parent) children.push_back(pid);
  }
  return children;
}

// SIGKILLs `node` (a launcher or a daemon) and its workers' process groups
// at once, as a machine that loses power: nothing of it gets to stop
// cleanly or say goodbye. Returns how many worker groups it killed.
inline int KillNode(Subprocess& node) {
  std::set<pid_t> groups;
  for (pid_t child : ChildrenOf(node.pid())) {
    const pid_t group = getpgid(child);
    if (group > 1 && group != getpgrp() && group != node.pid()) groups.insert(group);
  }
  node.Signal(SIGKILL);
  for (pid_t group : groups) kill(-group, SIGKILL);
  return static_cast<int>(groups.size());
}

}  // namespace elastrun::testing

#endif  // ELASTRUN_TESTS_TESTING_TRAINING_H_
