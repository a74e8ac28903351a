// End to end: one daemon per node id. The real elastrun-rendezvous and real
// elastrund processes with shell workers (no torch): a second daemon
// started with a node id in use leaves with exit 1 and a clear message
// before it touches anything of the first (its agent socket, its jobs'
// snapshot folders), and the first keeps its node and finishes its job;
// a daemon SIGKILLed and restarted with its node id is taken back at once,
// without waiting out the old lease.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using daemon_testing::ClusterTest;
using daemon_testing::kDeadline;
using daemon_testing::PollUntil;
using testing::BinDir;
using testing::FileExists;
using ::testing::HasSubstr;
using ::testing::Not;

class DaemonNodeIdE2eTest : public ClusterTest {
 protected:
  void SetUp() override {
    MakeCluster("daemon_nodeid_e2e");
    base_ = Subfolder("base");
    seen_ = Subfolder("seen");
  }

  // Starts an elastrund "n1"; every one shares the log folder and snapshot
  // base, as two daemons started with the same flags on one host would.
  testing::Subprocess& StartDaemon() {
    testing::Subprocess* d = cluster_->StartOwnDaemon(
        {BinDir() + "/elastrund", "--rendezvous", cluster_->address(), "--node-id", "n1",
         "--slots", "2", "--state-dir", dir_ + "/state-n1", "--log-dir", dir_ + "/logs",
         "--shutdown-timeout", "10s"},
        {"ELASTRUN_SNAPSHOT_BASE=" + base_,
         "ELASTRUN_TOKEN_FILE=" + cluster_->token_file(),
         "ELASTRUN_CRED_SOCKET=" + dir_ + "/cred.sock"});
    if (d == nullptr) std::abort();  // the expectation failed; nothing to test
    return *d;
  }

  // `elastrun submit` of a one-node job of 2 shell workers; its id.
  std::string Submit(const std::string& script) {
    return cluster_->SubmitShell("nodeid", 2, 0, script);
  }

  std::string base_, seen_;
};

TEST_F(DaemonNodeIdE2eTest, SecondDaemonWithTheNodeIdExitsAndTheFirstFinishesItsJob) {
  ASSERT_NO_FATAL_FAILURE(cluster_->StartService("127.0.0.1:0"));
  testing::Subprocess& first = StartDaemon();
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; })) << first.Output();
  // Each worker says it started, then waits for the test's go.
  const std::string job = Submit(absl::StrCat("touch ", seen_, "/$RANK; while [ ! -e ",
                                              dir_, "/go ]; do sleep 0.05; done"));
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(testing::WaitForFiles(seen_, "", 2, kDeadline).ok()) << first.Output();
  const std::string folder =
      absl::StrCat(base_, "/elastrun-", geteuid(), "/", job, "@n1");
  ASSERT_TRUE(FileExists(folder));

  testing::Subprocess& second = StartDaemon();
  ASSERT_TRUE(second.Wait(kDeadline).ok()) << second.Output();
  EXPECT_EQ(second.exit_code(), 1) << second.Output();
  EXPECT_THAT(
      second.Output(),
      HasSubstr("elastrund: node id 'n1' is already in use by another elastrund "
                "(node \"n1\" is held by another daemon at 127.0.0.1 (incarnation "));
  EXPECT_THAT(second.Output(), HasSubstr("lease expires in"));
  // It touched nothing of the first daemon's.
  EXPECT_TRUE(FileExists(dir_ + "/state-n1/agent.sock"));
  EXPECT_TRUE(FileExists(folder));

  FILE* go = std::fopen((dir_ + "/go").c_str(), "w");
  ASSERT_NE(go, nullptr);
  std::fclose(go);
  v1::JobStatus st = cluster_->WaitFinished(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << first.Output();
  EXPECT_EQ(st.history_size(), 1) << "the first daemon's round was disturbed";
  EXPECT_THAT(first.Output(), Not(HasSubstr("Watch stream ended")));
  EXPECT_EQ(cluster_->AliveNodes(), 1);
}

TEST_F(DaemonNodeIdE2eTest,
       DaemonSigkilledAndRestartedIsTakenBackWithoutWaitingForTheLease) {
  // A lease far longer than the test may wait: only the broken Watch stream
  // can free the node id in time.
  ASSERT_NO_FATAL_FAILURE(cluster_->StartService(
      "127.0.0.1:0", {"--heartbeat-interval", "1s", "--lease-timeout", "600s"}));
  testing::Subprocess& first = StartDaemon();
  // Killed once its Watch stream is open (registered is not enough: the
  // stream opens just after).
  ASSERT_TRUE(PollUntil([&] { return cluster_->WatchingNodes() == 1; }))
      << first.Output();

  first.Signal(SIGKILL);
  ASSERT_TRUE(first.Wait(kDeadline).ok());
  // The service sees the broken stream (not the 600 s lease) ...
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 0; }));
  testing::Subprocess& restarted = StartDaemon();
  // ... and takes the restarted daemon at once; a job is submitted once it
  // is registered (a submit no registered node could hold is refused).
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }))
      << restarted.Output();
  const std::string job = Submit(absl::StrCat("touch ", seen_, "/$RANK"));
  ASSERT_FALSE(job.empty());
  v1::JobStatus st = cluster_->WaitFinished(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED)
      << st.DebugString() << restarted.Output();
  EXPECT_FALSE(restarted.exit_code().has_value()) << restarted.Output();
  EXPECT_THAT(restarted.Output(), Not(HasSubstr("already in use")));
}

}  // namespace
}  // namespace elastrun
