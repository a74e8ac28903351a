// End to end: the real `elastrun run` on the real cgroup file system. A
// worker starts a grandchild (`sleep 1000 &`); SIGKILL the run and the
// grandchild is gone all the same (the run's watchdog kills its cgroup); a
// run stopped normally leaves no cgroup folder; an unprivileged run says
// in one line that it goes without cgroups. Waits are on events (files
// through inotify, process exits through pidfds) with generous deadlines.
// Skips where this machine has no writable cgroup2.
#include <errno.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/agent/cgroup.h"
#include "tests/testing/cgroups.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using testing::BinDir;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using testing::ReadFile;

constexpr absl::Duration kWait = absl::Seconds(120);

std::string Trimmed(const std::string& text) {
  return std::string(absl::StripAsciiWhitespace(text));
}

class RunCgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> own = testing::UsableOwnCgroup();
    if (!own.ok()) {
      GTEST_SKIP() << own.status().message()
                   << "; elastrun run falls back to process groups";
    }
    own_ = *own;
    seen_ = testing::MakeTempDir("seen");
    logs_ = testing::MakeTempDir("logs");
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=", seen_);
  }
  void TearDown() override {
    for (pid_t pid : testing::ProcessesWithEnv(marker_)) {
      ADD_FAILURE() << "process " << pid << " was left behind";
      kill(pid, SIGKILL);
    }
    // What a failed test left (nothing when it passed).
    for (const std::string& dir : run_dirs_) (void)launcher::KillCgroup(dir);
  }

  // The worker writes its cgroup to seen/cg, then runs `then`.
  std::unique_ptr<testing::Subprocess> StartRun(const std::string& then) {
    const std::string script =
        absl::StrCat("grep '^0::' /proc/self/cgroup | cut -c4- > ", seen_, "/tmp.cg; mv ",
                     seen_, "/tmp.cg ", seen_, "/cg; ", then);
    auto run = testing::Subprocess::Start(
        {BinDir() + "/elastrun", "run", "--log-dir", logs_, "--no-snapshots",
         "--shutdown-timeout", "10s", "/bin/sh", "-c", script},
        {marker_});
    EXPECT_TRUE(run.ok()) << run.status();
    return run.ok() ? *std::move(run) : nullptr;
  }
  // The folder of run `pid`, and checks that its worker ran in attempt 1.
  std::string RunFolder(pid_t pid) {
    const std::string dir = absl::StrCat(own_, "/elastrun-run@", pid);
    run_dirs_.push_back(dir);
    EXPECT_TRUE(testing::WaitForFiles(seen_, "cg", 1, kWait).ok());
    EXPECT_THAT(dir + "/attempt-1", EndsWith(Trimmed(ReadFile(seen_ + "/cg"))));
    EXPECT_TRUE(testing::FileExists(dir + "/attempt-1"));
    return dir;
  }

  std::string own_, seen_, logs_, marker_;
  std::vector<std::string> run_dirs_;
};

TEST_F(RunCgroupTest, SigkilledRunLeavesNoGrandchildRunning) {
  auto run = StartRun(absl::StrCat("sleep 1000 & echo $! > ", seen_, "/tmp.pid; mv ",
                                   seen_, "/tmp.pid ", seen_, "/pid; wait"));
  ASSERT_NE(run, nullptr);
  const std::string dir = RunFolder(run->pid());
  ASSERT_TRUE(testing::WaitForFiles(seen_, "pid", 1, kWait).ok());
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(Trimmed(ReadFile(seen_ + "/pid")), &grandchild));
  ASSERT_EQ(kill(grandchild, 0), 0) << "the grandchild runs";

  run->Signal(SIGKILL);
  auto status = run->Wait(kWait);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(WIFSIGNALED(*status));
  EXPECT_TRUE(testing::WaitProcessExited(grandchild, kWait))
      << "grandchild " << grandchild << " outlived the run";
  // The watchdog (its environment wiped: not a process of the job)
  // removes the folder once the run is gone; looked at until a deadline.
  for (pid_t pid : testing::ProcessesWithEnv(marker_))
    EXPECT_TRUE(testing::WaitProcessExited(pid, kWait));
  const absl::Time deadline = absl::Now() + kWait;
  while (testing::FileExists(dir) && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(testing::FileExists(dir)) << dir;
}

TEST_F(RunCgroupTest, StoppedRunLeavesNoCgroupFolder) {
  auto run = StartRun("exec sleep 1000");
  ASSERT_NE(run, nullptr);
  const std::string dir = RunFolder(run->pid());
  run->Signal(SIGTERM);
  auto status = run->Wait(kWait);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(run->exit_code(), 128 + SIGTERM) << run->Output();
  EXPECT_FALSE(testing::FileExists(dir)) << dir << " is removed when the run ends";
  EXPECT_THAT(run->Output(), ::testing::Not(HasSubstr("cgroups not used")));
}

TEST(RunCgroupFallbackTest, UnprivilegedRunSaysItGoesWithoutCgroups) {
  if (getuid() != 0 || getpwnam("nobody") == nullptr ||
      access("/usr/sbin/runuser", X_OK) != 0) {
    GTEST_SKIP() << "needs root, runuser and a user nobody";
  }
  const std::string logs = testing::MakeTempDir("logs");
  ASSERT_EQ(chmod(logs.c_str(), 0777), 0);
  auto run =
      testing::Run({"runuser", "-u", "nobody", "--", BinDir() + "/elastrun", "run",
                    "--log-dir", logs, "--no-snapshots", "/bin/sh", "-c", "echo ran"},
                   {}, kWait);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 0) << run->output;
  EXPECT_THAT(run->output,
              HasSubstr("cgroups not used (workers are stopped by process group"));
  EXPECT_THAT(run->output, HasSubstr("ran"));
}

}  // namespace
}  // namespace elastrun
