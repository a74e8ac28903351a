// End-to-end tests of `elastrun run` with real processes: the C++ test worker
// (c10d TCPStore + Gloo) and, where Debian's python3-torch is present, an
// unmodified torchrun-style PyTorch DDP script. Every test tags what it
// starts with a unique environment entry, and checks that nothing is left.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::BinDir;
using testing::FileExists;
using testing::ListFiles;
using testing::MakeTempDir;
using testing::ProcessesWithEnv;
using testing::ReadFile;
using testing::RunResult;
using testing::Subprocess;

constexpr absl::Duration kRunTimeout = absl::Seconds(120);

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_dir_ = MakeTempDir("logs");
    ready_dir_ = MakeTempDir("ready");
    // Runs inherit it: their snapshot folders stay off the real /dev/shm.
    setenv("ELASTRUN_SNAPSHOT_BASE", MakeTempDir("snapshots").c_str(), 1);
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=", ::testing::UnitTest::GetInstance()
                                                        ->current_test_info()
                                                        ->name(),
                           "-", getpid(), "-", log_dir_);
  }
  void TearDown() override {
    EXPECT_THAT(ProcessesWithEnv(marker_), ::testing::IsEmpty())
        << "processes were left behind";
  }

  // `elastrun run FLAGS -- test-worker WORKER_ARGS` with logs in log_dir_.
  std::vector<std::string> Command(const std::vector<std::string>& flags,
                                   const std::vector<std::string>& worker_args) {
    std::vector<std::string> argv = {BinDir() + "/elastrun", "run", "--log-dir", log_dir_,
                                     "--run-id", "job"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back(BinDir() + "/elastrun-test-worker");
    argv.insert(argv.end(), worker_args.begin(), worker_args.end());
    return argv;
  }

  RunResult RunOrDie(const std::vector<std::string>& argv,
                     absl::Duration timeout = kRunTimeout) {
    auto r = testing::Run(argv, {marker_}, timeout);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{};
  }

  std::string Attempt(int n, int local_rank) {
    return absl::StrCat(log_dir_, "/job/attempt_", n, "/", local_rank);
  }

  std::string log_dir_, ready_dir_, marker_;
};

class WorldSizeTest : public LauncherTest, public ::testing::WithParamInterface<int> {};

TEST_P(WorldSizeTest, AllRanksAllreduceAndSucceed) {
  const int n = GetParam();
  RunResult r = RunOrDie(Command({"--nproc-per-node", absl::StrCat(n)}, {}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("[rank", rank, "]:rank ", rank, "/", n,
                                                 " ok restart=0")));
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, WorldSizeTest, ::testing::Values(1, 2, 4));

TEST_F(LauncherTest, WorkerEnvironmentIsTorchrunContract) {
  RunResult r = RunOrDie(Command({"--nproc-per-node", "2", "--max-restarts", "4"},
                                 {"--print-env"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line :
       {"[rank1]:RANK=1", "[rank1]:LOCAL_RANK=1", "[rank1]:WORLD_SIZE=2",
        "[rank1]:LOCAL_WORLD_SIZE=2", "[rank1]:GROUP_RANK=0", "[rank1]:GROUP_WORLD_SIZE=1",
        "[rank1]:ROLE_RANK=1", "[rank1]:ROLE_WORLD_SIZE=2", "[rank1]:ROLE_NAME=default",
        "[rank1]:MASTER_ADDR=127.0.0.1", "[rank1]:TORCHELASTIC_RESTART_COUNT=0",
        "[rank1]:TORCHELASTIC_MAX_RESTARTS=4", "[rank1]:TORCHELASTIC_RUN_ID=job",
        "[rank1]:TORCHELASTIC_USE_AGENT_STORE=False", "[rank1]:OMP_NUM_THREADS=1"}) {
    EXPECT_THAT(r.output, HasSubstr(line));
  }
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("[rank1]:TORCHELASTIC_ERROR_FILE=",
                                               Attempt(0, 1), "/error.json")));
}

TEST_F(LauncherTest, LogLayoutPerAttemptAndRank) {
  RunResult r = RunOrDie(Command({"--nproc-per-node", "2", "--max-restarts", "1"},
                                 {"--fail-rank", "1", "--fail-mode", "exit:5"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int attempt : {0, 1}) {
    for (int local : {0, 1}) {
      EXPECT_TRUE(FileExists(Attempt(attempt, local) + "/stdout.log"));
      EXPECT_TRUE(FileExists(Attempt(attempt, local) + "/stderr.log"));
    }
  }
  // Logs hold the raw output, without the console prefix.
  EXPECT_THAT(ReadFile(Attempt(1, 0) + "/stdout.log"), HasSubstr("rank 0/2 ok restart=1"));
  EXPECT_THAT(ReadFile(Attempt(1, 0) + "/stdout.log"), Not(HasSubstr("[rank0]")));
  EXPECT_FALSE(FileExists(absl::StrCat(log_dir_, "/job/attempt_2")));

  // A second run with the same id never overwrites the first one's logs.
  RunResult again = RunOrDie(Command({"--nproc-per-node", "1"}, {}));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(FileExists(absl::StrCat(log_dir_, "/job-1/attempt_0/0/stdout.log")));
  EXPECT_TRUE(FileExists(Attempt(1, 1) + "/stdout.log"));
}

TEST_F(LauncherTest, WorkerKilledOnceIsRestartedAndRunSucceeds) {
  RunResult r = RunOrDie(Command({"--nproc-per-node", "2", "--max-restarts", "2"},
                                 {"--fail-rank", "1", "--fail-mode", "sigkill"}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("worker rank 1 failed with signal 9 (SIGKILL); restarting"));
  EXPECT_THAT(r.output, HasSubstr("[rank1]:rank 1/2 ok restart=1"));
  EXPECT_THAT(r.output, HasSubstr("succeeded after 1 restart(s)"));
}

TEST_F(LauncherTest, WorkerExitingOnceIsRestartedAndRunSucceeds) {
  RunResult r = RunOrDie(Command({"--nproc-per-node", "2", "--max-restarts", "1"},
                                 {"--fail-rank", "0", "--fail-mode", "exit:3"}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("worker rank 0 failed with exit code 3; restarting"));
  EXPECT_THAT(r.output, HasSubstr("[rank0]:rank 0/2 ok restart=1"));
}

TEST_F(LauncherTest, FailingEveryTimeGivesWorkersCodeAndRootCause) {
  RunResult r = RunOrDie(Command({"--nproc-per-node", "2", "--max-restarts", "2"},
                                 {"--fail-rank", "1", "--fail-mode", "exit:3",
                                  "--fail-restarts", "-1"}));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("FAILED after 2 restart(s)"));
  EXPECT_THAT(r.output, HasSubstr("rank       : 1 (local_rank: 1)"));
  EXPECT_THAT(r.output, HasSubstr("exit       : exit code 3"));
  EXPECT_TRUE(FileExists(Attempt(2, 1) + "/stdout.log"));
  EXPECT_FALSE(FileExists(absl::StrCat(log_dir_, "/job/attempt_3")));
}

TEST_F(LauncherTest, KilledEveryTimeExitsWith128PlusSignal) {
  RunResult r = RunOrDie(Command({"--nproc-per-node", "2", "--max-restarts", "1"},
                                 {"--fail-rank", "0", "--fail-mode", "sigkill",
                                  "--fail-restarts", "-1"}));
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.output;
  EXPECT_THAT(r.output, HasSubstr("exit       : signal 9 (SIGKILL)"));
  EXPECT_THAT(r.output, HasSubstr("rank       : 0 (local_rank: 0)"));
}

TEST_F(LauncherTest, MaxRestartsZeroFailsAtOnce) {
  RunResult r = RunOrDie(Command({"--nproc-per-node", "2", "--max-restarts", "0"},
                                 {"--fail-rank", "1", "--fail-mode", "exit:7"}));
  EXPECT_EQ(r.exit_code, 7) << r.output;
  EXPECT_THAT(r.output, Not(HasSubstr("restarting")));
  EXPECT_FALSE(FileExists(absl::StrCat(log_dir_, "/job/attempt_1")));
}

TEST_F(LauncherTest, ErrorFileMessageReachesTheSummary) {
  RunResult r = RunOrDie(Command({"--nproc-per-node", "2"},
                                 {"--fail-rank", "1", "--fail-mode", "throw"}));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(FileExists(Attempt(0, 1) + "/error.json"));
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("error_file : ", Attempt(0, 1), "/error.json")));
  EXPECT_THAT(r.output, HasSubstr("message    : "));
  EXPECT_THAT(r.output, HasSubstr("injected failure"));
}

TEST_F(LauncherTest, SigtermToLauncherStopsEverythingAndExits143) {
  auto p = Subprocess::Start(Command({"--nproc-per-node", "4"},
                                     {"--ready-dir", ready_dir_, "--hang"}),
                             {marker_});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(testing::WaitForFiles(ready_dir_, "ready.", 4, kRunTimeout).ok())
      << (*p)->Output();
  EXPECT_EQ(ProcessesWithEnv(marker_).size(), 5u);  // the launcher and 4 workers
  (*p)->Signal(SIGTERM);
  ASSERT_TRUE((*p)->Wait(kRunTimeout).ok());
  EXPECT_EQ(*(*p)->exit_code(), 128 + SIGTERM) << (*p)->Output();
  EXPECT_THAT((*p)->Output(), HasSubstr("stopped by SIGTERM"));
  // Nothing is left: not in the group, not anywhere (TearDown checks /proc).
  EXPECT_NE(killpg((*p)->pid(), 0), 0);
}

TEST_F(LauncherTest, WorkersDieWhenTheLauncherIsKilled) {
  auto p = Subprocess::Start(Command({"--nproc-per-node", "2"},
                                     {"--ready-dir", ready_dir_, "--hang"}),
                             {marker_});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(testing::WaitForFiles(ready_dir_, "ready.", 2, kRunTimeout).ok())
      << (*p)->Output();
  (*p)->Signal(SIGKILL);  // no chance to stop anything: the kernel must
  ASSERT_TRUE((*p)->Wait(kRunTimeout).ok());
  // The parent-death signal kills the workers; wait for it with a deadline.
  const absl::Time deadline = absl::Now() + kRunTimeout;
  while (!ProcessesWithEnv(marker_).empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_THAT(ProcessesWithEnv(marker_), ::testing::IsEmpty());
}

TEST_F(LauncherTest, WorkerIgnoringSigtermIsKilledAfterGrace) {
  auto p = Subprocess::Start(
      Command({"--nproc-per-node", "2", "--shutdown-timeout", "1"},
              {"--ready-dir", ready_dir_, "--hang", "--ignore-sigterm"}),
      {marker_});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(testing::WaitForFiles(ready_dir_, "ready.", 2, kRunTimeout).ok())
      << (*p)->Output();
  (*p)->Signal(SIGINT);
  ASSERT_TRUE((*p)->Wait(kRunTimeout).ok());
  EXPECT_EQ(*(*p)->exit_code(), 128 + SIGINT) << (*p)->Output();
}

TEST_F(LauncherTest, HundredBackToBackRestartsNeverCollideOnPort) {
  // Every attempt's workers pass their first collective and rank 1 then
  // exits 1, until the 100th restart: 101 rendezvous on fresh ports.
  // Each attempt starts two libtorch processes (~0.35 s of CPU each): on a
  // loaded 2-core machine this takes minutes, hence the long deadline.
  RunResult r = RunOrDie(Command({"--nproc-per-node", "2", "--max-restarts", "100",
                                  "--redirects", "3"},
                                 {"--fail-rank", "1", "--fail-mode", "exit:1",
                                  "--fail-restarts", "100"}),
                         absl::Minutes(10));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("succeeded after 100 restart(s)"));
  EXPECT_THAT(r.output, Not(HasSubstr("EADDRINUSE")));
  EXPECT_THAT(r.output, Not(HasSubstr("Address already in use")));
}

// Pids of the processes tagged with `marker` whose environment at start had
// `entry` (or, with entry empty, had no RANK: standbys and the launcher).
std::set<pid_t> Tagged(const std::string& marker, const std::string& entry) {
  std::set<pid_t> out;
  for (pid_t pid : ProcessesWithEnv(marker)) {
    const std::string env = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
    const bool has_rank = absl::StrContains(env, std::string("\0RANK=", 6)) ||
                          absl::StartsWith(env, "RANK=");
    if (entry.empty() ? !has_rank
                      : absl::StrContains(env, absl::StrCat(std::string(1, '\0'), entry,
                                                            std::string(1, '\0')))) {
      out.insert(pid);
    }
  }
  return out;
}

// The standby workers among the processes tagged with `marker`: those
// started with a standby socket (ELASTRUN_STANDBY_FD) and no RANK yet. The
// launcher's own helpers (its cgroup watchdog) and a child between fork
// and exec carry the marker too, but not that.
std::set<pid_t> Standbys(const std::string& marker) {
  std::set<pid_t> out;
  for (pid_t pid : Tagged(marker, "")) {
    const std::string env = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
    if (absl::StrContains(env, absl::StrCat(std::string(1, '\0'), "ELASTRUN_STANDBY_FD=")) ||
        absl::StartsWith(env, "ELASTRUN_STANDBY_FD=")) {
      out.insert(pid);
    }
  }
  return out;
}

// `launcher` runs 2 hanging workers with --standby and --max-restarts 1.
// Waits for attempt 0's ranks and then for the next attempt's 2 standbys
// (the tagged processes without a RANK, besides the launcher), kills rank 1,
// and checks that attempt 1's ranks are those standbys, started before the
// failure. Then stops the launcher with SIGTERM.
void ExpectStandbysTakeOverOnRestart(Subprocess& launcher, const std::string& marker,
                                     const std::string& ready_dir) {
  ASSERT_TRUE(testing::WaitForFiles(ready_dir, "ready.0.", 2, kRunTimeout).ok())
      << launcher.Output();
  std::set<pid_t> standbys;
  const absl::Time deadline = absl::Now() + kRunTimeout;
  while (standbys.size() < 2 && absl::Now() < deadline) {
    standbys = Standbys(marker);
    if (standbys.size() < 2) {
      // Waiting for processes has no file to watch; a short pause per check.
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  ASSERT_EQ(standbys.size(), 2u) << launcher.Output();
  std::set<pid_t> rank1 = Tagged(marker, "RANK=1");
  ASSERT_EQ(rank1.size(), 1u);
  kill(*rank1.begin(), SIGKILL);

  ASSERT_TRUE(testing::WaitForFiles(ready_dir, "ready.1.", 2, kRunTimeout).ok())
      << launcher.Output();
  for (pid_t pid : standbys) EXPECT_EQ(kill(pid, 0), 0) << "standby " << pid << " is gone";
  launcher.Signal(SIGTERM);
  ASSERT_TRUE(launcher.Wait(kRunTimeout).ok());
  EXPECT_EQ(*launcher.exit_code(), 128 + SIGTERM) << launcher.Output();
  EXPECT_THAT(launcher.Output(), HasSubstr("worker rank 1 failed with signal 9 (SIGKILL)"));
}

TEST_F(LauncherTest, StandbyWorkersTakeOverOnRestart) {
  auto p = Subprocess::Start(Command({"--nproc-per-node", "2", "--max-restarts", "1",
                                      "--standby"},
                                     {"--ready-dir", ready_dir_, "--hang"}),
                             {marker_});
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectStandbysTakeOverOnRestart(**p, marker_, ready_dir_);
}

// The run's snapshot folder reaches every worker: both ranks of attempt 0
// and the standbys that become attempt 1 (they are started before the
// failure, so it must be in what they start with). Gone after SIGTERM.
TEST_F(LauncherTest, StandbysStartWithTheRunsSnapshotFolder) {
  const std::string base = MakeTempDir("snapshot_base");
  const std::string folder = absl::StrCat(base, "/elastrun-", geteuid(), "/job");
  const std::string entry = "ELASTRUN_SNAPSHOT=" + folder;
  auto p = Subprocess::Start(Command({"--nproc-per-node", "2", "--max-restarts", "1",
                                      "--standby"},
                                     {"--ready-dir", ready_dir_, "--hang"}),
                             {marker_, "ELASTRUN_SNAPSHOT_BASE=" + base});
  ASSERT_TRUE(p.ok()) << p.status();
  Subprocess& launcher = **p;
  ASSERT_TRUE(testing::WaitForFiles(ready_dir_, "ready.0.", 2, kRunTimeout).ok())
      << launcher.Output();
  std::set<pid_t> standbys;
  const absl::Time deadline = absl::Now() + kRunTimeout;
  while (standbys.size() < 2 && absl::Now() < deadline) {
    standbys = Standbys(marker_);
    // Waiting for processes has no file to watch; a short pause per check.
    if (standbys.size() < 2) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(standbys.size(), 2u) << launcher.Output();
  std::set<pid_t> with_folder = Tagged(marker_, entry);
  for (pid_t pid : standbys) EXPECT_EQ(with_folder.count(pid), 1u) << "standby " << pid;
  EXPECT_EQ(with_folder.size(), 4u) << "2 ranks and 2 standbys";
  struct stat st;
  ASSERT_EQ(lstat(folder.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  std::set<pid_t> rank1 = Tagged(marker_, "RANK=1");
  ASSERT_EQ(rank1.size(), 1u);
  kill(*rank1.begin(), SIGKILL);
  ASSERT_TRUE(testing::WaitForFiles(ready_dir_, "ready.1.", 2, kRunTimeout).ok())
      << launcher.Output();
  for (pid_t pid : standbys) EXPECT_EQ(kill(pid, 0), 0) << "standby " << pid << " is gone";
  launcher.Signal(SIGTERM);
  ASSERT_TRUE(launcher.Wait(kRunTimeout).ok());
  EXPECT_EQ(*launcher.exit_code(), 128 + SIGTERM) << launcher.Output();
  EXPECT_FALSE(FileExists(folder)) << launcher.Output();
}

TEST_F(LauncherTest, StandbyIsHarmlessForProgramsWithoutTheProtocol) {
  // A shell worker never reports its start-up, so no standby is started and
  // restarts work as without --standby.
  auto r = testing::Run({BinDir() + "/elastrun", "run", "--log-dir", log_dir_, "--run-id",
                         "job", "--standby", "--nproc-per-node", "2", "--max-restarts", "1",
                         "sh", "-c",
                         "test \"$TORCHELASTIC_RESTART_COUNT\" = 1 || test $RANK = 0 || "
                         "exit 4; echo done $RANK"},
                        {marker_}, kRunTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->output;
  EXPECT_THAT(r->output, HasSubstr("[rank1]:done 1"));
  EXPECT_THAT(r->output, HasSubstr("succeeded after 1 restart(s)"));
}

TEST_F(LauncherTest, UnknownProgramIsAClearError) {
  auto r = testing::Run({BinDir() + "/elastrun", "run", "--log-dir", log_dir_,
                         "no-such-program-xyz"},
                        {marker_});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 127);
  EXPECT_THAT(r->output, HasSubstr("cannot run 'no-such-program-xyz'"));
}

TEST_F(LauncherTest, BadFlagIsUsageError) {
  auto r = testing::Run({BinDir() + "/elastrun", "run", "--nproc-per-node", "zero", "x"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->output, HasSubstr("--nproc-per-node"));
}

// torchrun compatibility: an unmodified PyTorch DDP script.
class PythonDdpTest : public LauncherTest {
 protected:
  void SetUp() override {
    LauncherTest::SetUp();
    python_ = testing::TorchPython();
    if (python_.empty()) GTEST_SKIP() << "/usr/bin/python3 has no torch (python3-torch)";
  }
  std::vector<std::string> PyCommand(const std::vector<std::string>& flags,
                                     const std::vector<std::string>& script_args) {
    std::vector<std::string> argv = {BinDir() + "/elastrun", "run", "--log-dir", log_dir_,
                                     "--run-id", "job"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back(testing::SourceDir() + "/tests/python/ddp_worker.py");
    argv.insert(argv.end(), script_args.begin(), script_args.end());
    return argv;
  }
  RunResult RunPy(const std::vector<std::string>& argv) {
    auto r = testing::Run(argv, {marker_, "ELASTRUN_PYTHON=" + python_}, kRunTimeout);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{};
  }
  std::string python_;
};

TEST_F(PythonDdpTest, UnmodifiedScriptTrainsOnTwoProcesses) {
  RunResult r = RunPy(PyCommand({"--nproc-per-node", "2"}, {}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[rank0]:rank 0/2 ok restart=0"));
  EXPECT_THAT(r.output, HasSubstr("[rank1]:rank 1/2 ok restart=0"));
}

TEST_F(PythonDdpTest, CrashOnceRestartsAndSucceeds) {
  RunResult r = RunPy(PyCommand({"--nproc-per-node", "2", "--max-restarts", "1"},
                                {"--fail-rank", "1", "--fail-mode", "sigkill"}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("restarting"));
  EXPECT_THAT(r.output, HasSubstr("[rank1]:rank 1/2 ok restart=1"));
}

TEST_F(PythonDdpTest, RecordedExceptionIsTheRootCause) {
  RunResult r = RunPy(PyCommand({"--nproc-per-node", "2"},
                                {"--fail-rank", "0", "--fail-mode", "throw"}));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("rank       : 0 (local_rank: 0)"));
  EXPECT_THAT(r.output, HasSubstr("injected failure"));
  EXPECT_THAT(r.output, HasSubstr("traceback  :"));
}

// --standby with an unmodified Python script: the next attempt's
// interpreters start (torch imported) once the workers have, and a restart
// activates them; the script sees the environment, argv and error file of
// its attempt.
TEST_F(PythonDdpTest, StandbyInterpretersTakeOverOnRestart) {
  auto p = Subprocess::Start(PyCommand({"--nproc-per-node", "2", "--max-restarts", "1",
                                        "--standby"},
                                       {"--ready-dir", ready_dir_, "--hang"}),
                             {marker_, "ELASTRUN_PYTHON=" + python_});
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectStandbysTakeOverOnRestart(**p, marker_, ready_dir_);
}

TEST_F(PythonDdpTest, StandbyRunsTheScriptAsTorchrunWould) {
  // Restarted from standbys: the second attempt's ranks train and finish.
  RunResult r = RunPy(PyCommand({"--nproc-per-node", "2", "--max-restarts", "1", "--standby"},
                                {"--fail-rank", "1", "--fail-mode", "exit:3"}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[rank0]:rank 0/2 ok restart=1"));
  EXPECT_THAT(r.output, HasSubstr("[rank1]:rank 1/2 ok restart=1"));
  // A recorded exception still names its rank and traceback.
  r = RunPy(PyCommand({"--nproc-per-node", "2", "--standby"},
                      {"--fail-rank", "0", "--fail-mode", "throw"}));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("rank       : 0 (local_rank: 0)"));
  EXPECT_THAT(r.output, HasSubstr("injected failure"));
  EXPECT_THAT(r.output, HasSubstr("traceback  :"));
}

}  // namespace
}  // namespace elastrun
