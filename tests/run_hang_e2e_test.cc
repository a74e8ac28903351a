// End to end: hang detection in the real `elastrun run`, with Python
// workers that use the `elastrun` helper the launcher puts on PYTHONPATH
// (elastrun.report; faulthandler on SIGUSR1), real signals (a rank that
// SIGSTOPs itself) and /proc. Waits are on the run's exit with generous
// deadlines; the workers' own pauses are what a hung program does.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using testing::BinDir;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadFile;
using testing::RunResult;

constexpr absl::Duration kWait = absl::Seconds(180);

// What the workers import before anything else: the launcher's helper.
constexpr char kPrelude[] = R"(import os, signal, sys, time
import elastrun
rank = int(os.environ["RANK"])
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
)";

bool HavePython() {
  return system("python3 -c 'import faulthandler' >/dev/null 2>&1") == 0;
}
bool HaveEuStack() { return system("command -v eu-stack >/dev/null 2>&1") == 0; }

class RunHangTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HavePython()) GTEST_SKIP() << "python3 is not installed";
    dir_ = testing::MakeTempDir("hang");
    logs_ = testing::MakeTempDir("hang_logs");
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=", dir_);
    setenv("ELASTRUN_SNAPSHOT_BASE", testing::MakeTempDir("hang_snap").c_str(), 1);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    EXPECT_THAT(testing::ProcessesWithEnv(marker_), ::testing::IsEmpty())
        << "processes were left behind";
  }

  // Writes the worker script (kPrelude + `body`) and runs it under
  // `elastrun run FLAGS`.
  RunResult Run(const std::vector<std::string>& flags, const std::string& body) {
    const std::string script = dir_ + "/worker.py";
    std::ofstream(script) << kPrelude << body;
    std::vector<std::string> argv = {
        BinDir() + "/elastrun", "run", "--log-dir", logs_, "--run-id", "h"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back(script);
    auto r = testing::Run(argv, {marker_, "ELASTRUN_PYTHON=python3"}, kWait);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{};
  }
  std::string Log(int attempt, int local_rank, const char* stream) {
    return ReadFile(absl::StrCat(logs_, "/h/attempt_", attempt, "/", local_rank, "/",
                                 stream, ".log"));
  }

  std::string dir_, logs_, marker_;
};

TEST_F(RunHangTest, StoppedRankIsHungItsStacksLoggedAndTheGroupRestarts) {
  // Rank 1 stops itself (SIGSTOP) after 5 steps in the first attempt; rank
  // 0 then waits for it forever, as in a collective. The second attempt
  // runs through. Both wait in a loop: the dump's SIGUSR1 ends a pause()
  // (faulthandler's handler returns), and a rank 1 that then ran on and
  // exited would be gone before eu-stack looks at it.
  RunResult r =
      Run({"--nproc-per-node", "2", "--max-restarts", "1", "--hang-timeout", "2s"},
          R"(for step in range(1, 6):
    elastrun.report(step, loss=1.0 / step)
if restart == 0:
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
        print("continued after the stop", file=sys.stderr, flush=True)
    while True:
        signal.pause()
print("rank", rank, "done", flush=True)
)");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Rank 1, stopped, is the cause, though rank 0 may have timed out first.
  EXPECT_THAT(r.output, HasSubstr("elastrun: rank 1 hung at step 5 (no progress for "));
  EXPECT_THAT(r.output, HasSubstr("; restarting (1 of 1)"));
  EXPECT_THAT(r.output, HasSubstr("[rank1]:rank 1 done"));
  EXPECT_THAT(r.output, HasSubstr("succeeded after 1 restart(s)"));
  const std::string log = Log(0, 1, "stderr");
  EXPECT_THAT(log, HasSubstr("elastrun: rank 1 hung at step 5"));
  // Python's own dump (faulthandler, all threads), at the line it stopped.
  EXPECT_THAT(log, HasSubstr("most recent call first"));
  EXPECT_THAT(log, HasSubstr("worker.py\", line "));
  if (HaveEuStack()) {
    EXPECT_THAT(log, HasSubstr("TID "));  // eu-stack's native stacks
  } else {
    std::cerr << "eu-stack is not installed (elfutils): native stacks not checked\n";
  }
  // Rank 0 was waiting, not the cause.
  EXPECT_THAT(Log(0, 0, "stderr"), Not(HasSubstr("hung")));
}

TEST_F(RunHangTest, WorkerHungInASleepDumpsItsPythonStackAndTheRunFails) {
  RunResult r = Run({"--nproc-per-node", "1", "--hang-timeout", "2s"},
                    R"(for step in range(1, 4):
    elastrun.report(step)
time.sleep(3600)
)");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("FAILED after 0 restart(s)"));
  EXPECT_THAT(r.output,
              HasSubstr("hang       : rank 0 hung at step 3 (no progress for 2"));
  const std::string log = Log(0, 0, "stderr");
  EXPECT_THAT(log, HasSubstr("most recent call first"));
  EXPECT_THAT(log, HasSubstr("worker.py\", line 7 in <module>"));
}

TEST_F(RunHangTest, SilentProgramBurningCpuIsNotHung) {
  // Reports nothing for 3 times the timeout, but computes all along.
  RunResult r = Run({"--nproc-per-node", "1", "--hang-timeout", "1s"},
                    R"(end = time.monotonic() + 3
n = 0
while time.monotonic() < end:
    n += 1
print("computed", flush=True)
)");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[rank0]:computed"));
  EXPECT_THAT(r.output, Not(HasSubstr("hung")));
}

TEST_F(RunHangTest, HelperIsANoOpOutsideElastrun) {
  const std::string script = dir_ + "/alone.py";
  std::ofstream(script) << "import elastrun\nelastrun.report(1, x=2)\nprint('fine')\n";
  auto r = testing::Run({"python3", script},
                        {marker_, "PYTHONPATH=" + BinDir() + "/../share/elastrun/python",
                         "ELASTRUN_AGENT_SOCKET=", "RANK="},
                        kWait);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->output;
  EXPECT_THAT(r->output, HasSubstr("fine"));
}

}  // namespace
}  // namespace elastrun
