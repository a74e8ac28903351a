// End to end: elastrund's cgroups on the real cgroup file system. A worker
// of a job starts a grandchild (`sleep 1000 &`); the daemon is SIGKILLed
// (its workers die with it, the grandchild does not: it is an orphan now);
// the daemon restarted with the same node id kills it at start and says so.
// The real elastrun-rendezvous, elastrund and `elastrun submit`; waits are
// on events (inotify, pidfds) or the daemon's log, with generous deadlines.
// Skips where this machine has no writable cgroup2.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/agent/cgroup.h"
#include "tests/testing/cgroups.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using daemon_testing::ClusterTest;
using daemon_testing::kDeadline;
using daemon_testing::PollUntil;
using testing::BinDir;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using testing::ReadFile;

std::string Trimmed(const std::string& text) {
  return std::string(absl::StripAsciiWhitespace(text));
}

class DaemonCgroupE2eTest : public ClusterTest {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> own = testing::UsableOwnCgroup();
    if (!own.ok()) {
      GTEST_SKIP() << own.status().message()
                   << "; elastrund falls back to process groups";
    }
    own_ = *own;
    MakeCluster("daemon_cgroup_e2e");
    base_ = Subfolder("base");
    seen_ = Subfolder("seen");
    // Unique on this machine: tests running at once never share a folder.
    node_ = absl::StrCat("cg", getpid());
  }
  void TearDown() override {
    ClusterTest::TearDown();
    for (pid_t pid : daemon_pids_) {
      (void)launcher::KillCgroup(absl::StrCat(own_, "/elastrun-node-", node_, "@", pid));
    }
  }

  testing::Subprocess& StartDaemon() {
    testing::Subprocess* d = cluster_->StartOwnDaemon(
        {BinDir() + "/elastrund", "--rendezvous", cluster_->address(), "--node-id", node_,
         "--slots", "1", "--state-dir", dir_ + "/daemon-state", "--shutdown-timeout",
         "10s", "--token-file", cluster_->token_file(), "--cred-socket", "none"},
        {"ELASTRUN_SNAPSHOT_BASE=" + base_});
    if (d == nullptr) std::abort();  // the expectation failed; nothing to test
    daemon_pids_.push_back(d->pid());
    return *d;
  }

  // `elastrun submit` of a one-node job of 1 shell worker; its id.
  std::string Submit(const std::string& script) {
    return cluster_->SubmitShell("cgroup", 1, 0, script);
  }

  std::string own_, base_, seen_, node_;
  std::vector<pid_t> daemon_pids_;  // their cgroups are removed at the end
};

TEST_F(DaemonCgroupE2eTest, RestartedDaemonKillsWhatItsSigkilledPredecessorLeft) {
  ASSERT_NO_FATAL_FAILURE(cluster_->StartService("127.0.0.1:0"));
  testing::Subprocess& first = StartDaemon();
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; })) << first.Output();
  // The worker says where it runs, then starts its grandchild.
  const std::string job = Submit(
      absl::StrCat("grep '^0::' /proc/self/cgroup | cut -c4- > ", seen_, "/tmp.cg; mv ",
                   seen_, "/tmp.cg ", seen_, "/cg; sleep 1000 & echo $! > ", seen_,
                   "/tmp.pid; mv ", seen_, "/tmp.pid ", seen_, "/pid; wait"));
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(testing::WaitForFiles(seen_, "pid", 1, kDeadline).ok()) << first.Output();
  const std::string node_dir =
      absl::StrCat(own_, "/elastrun-node-", node_, "@", first.pid());
  const std::string cg = Trimmed(ReadFile(seen_ + "/cg"));
  EXPECT_THAT(cg, ::testing::MatchesRegex(".*/elastrun-node-" + node_ +
                                          "@[0-9]+/attempt-[0-9]+"));
  EXPECT_THAT(node_dir, EndsWith(cg.substr(0, cg.rfind('/'))))
      << "in the daemon's folder";
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(Trimmed(ReadFile(seen_ + "/pid")), &grandchild));

  first.Signal(SIGKILL);
  ASSERT_TRUE(first.Wait(kDeadline).ok());
  EXPECT_FALSE(testing::WaitProcessExited(grandchild, absl::ZeroDuration()))
      << "the grandchild outlives a SIGKILLed daemon (an orphan)";
  // Restarted once the service has seen the broken Watch stream: before
  // that the node id is still held, and the restarted daemon is refused.
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 0; }));

  testing::Subprocess& restarted = StartDaemon();
  EXPECT_TRUE(testing::WaitProcessExited(grandchild, kDeadline))
      << "grandchild " << grandchild << " outlived the restart\n"
      << restarted.Output();
  const std::string line =
      absl::StrCat(" processes left by a previous elastrund for node ", node_);
  ASSERT_TRUE(PollUntil([&] { return absl::StrContains(restarted.Output(), line); }))
      << restarted.Output();
  EXPECT_THAT(restarted.Output(), ::testing::ContainsRegex("killed [12]" + line));
  EXPECT_THAT(restarted.Output(), ::testing::Not(HasSubstr("cgroups not used")));
  struct stat st;
  EXPECT_NE(stat(node_dir.c_str(), &st), 0) << node_dir << " was removed";
  // The job re-formed on the restarted daemon; cancelled, its new
  // grandchild dies with its attempt's cgroup.
  ASSERT_TRUE(cluster_->Cancel(job));
  EXPECT_EQ(cluster_->WaitFinished(job).state(), v1::JOB_STATE_CANCELLED)
      << restarted.Output();
}

TEST_F(DaemonCgroupE2eTest, JobThatEndsLeavesNoAttemptFolder) {
  ASSERT_NO_FATAL_FAILURE(cluster_->StartService("127.0.0.1:0"));
  testing::Subprocess& daemon = StartDaemon();
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; })) << daemon.Output();
  const std::string job = Submit(
      absl::StrCat("grep '^0::' /proc/self/cgroup | cut -c4- > ", seen_, "/cg; exit 0"));
  ASSERT_FALSE(job.empty());
  v1::JobStatus st = cluster_->WaitFinished(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << daemon.Output();
  const std::string cg = Trimmed(ReadFile(seen_ + "/cg"));
  EXPECT_THAT(cg, HasSubstr(absl::StrCat("/elastrun-node-", node_, "@", daemon.pid(),
                                         "/attempt-")));
  const std::string node_dir =
      absl::StrCat(own_, "/elastrun-node-", node_, "@", daemon.pid());
  // The attempt's end and the service's word on the job race: wait for the
  // folder list to show no attempt.
  EXPECT_TRUE(PollUntil([&] { return testing::ListFiles(node_dir, "attempt-").empty(); }))
      << "an attempt that ended left its folder";
  struct stat s;
  EXPECT_EQ(stat(node_dir.c_str(), &s), 0) << "the daemon's own folder lives with it";
}

}  // namespace
}  // namespace elastrun
