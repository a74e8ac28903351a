// Attempts for the agent's tests: workers with ranks 0..n-1, no log files,
// nothing on the console, and no next attempt.
#ifndef ELASTRUN_LAUNCHER_AGENT_TEST_SPECS_H_
#define ELASTRUN_LAUNCHER_AGENT_TEST_SPECS_H_

#include <string>
#include <vector>

#include "launcher/agent/attempt_spec.h"

namespace elastrun::launcher::testing {

// One worker per argv, worker i with local rank and rank i.
inline AttemptSpec AttemptOf(const std::vector<std::vector<std::string>>& argvs) {
  AttemptSpec spec;
  for (size_t i = 0; i < argvs.size(); ++i) {
    WorkerSpec w;
    w.local_rank = w.rank = static_cast<int>(i);
    w.process.argv = argvs[i];
    w.process.env = {"PATH=/usr/bin:/bin"};
    spec.workers.push_back(w);
    WorkerOutput o;
    o.stdout_to_console = o.stderr_to_console = false;
    spec.outputs.push_back(o);
  }
  spec.next_attempt_possible = false;
  return spec;
}

// One worker per shell script (`/bin/sh -c SCRIPT`).
inline AttemptSpec ShellAttempt(const std::vector<std::string>& scripts) {
  std::vector<std::vector<std::string>> argvs;
  for (const std::string& s : scripts) argvs.push_back({"/bin/sh", "-c", s});
  return AttemptOf(argvs);
}

}  // namespace elastrun::launcher::testing

#endif  // ELASTRUN_LAUNCHER_AGENT_TEST_SPECS_H_
