// End to end: the real elastrun-rendezvous, a real elastrund and shell
// workers (no torch): a job's snapshot folder on the node, the same in
// every round, gone when the job succeeds or is cancelled, a starting
// daemon's removal of its node's leftovers, and `elastrun run`'s: it keeps
// out of a live daemon's folders and removes a SIGKILLed one's. ELASTRUN_SNAPSHOT_BASE
// points into the test's own temporary folder: the real /dev/shm is never touched.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
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

bool IsDir(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void Touch(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  std::fclose(f);
}

// Each worker writes "<ELASTRUN_SNAPSHOT>|<its mode>" to
// seen/<restart>.<rank>, leaves a file in the folder, then runs `then`.
std::string Worker(const std::string& seen, const std::string& then) {
  return absl::StrCat(
      "s=\"$ELASTRUN_SNAPSHOT\"; m=$([ -n \"$s\" ] && stat -c %a \"$s\"); ",
      "[ -n \"$s\" ] && echo x > \"$s/rank$RANK.slot0\"; ", "echo \"$s|$m\" > ", seen,
      "/tmp.$RANK; mv ", seen, "/tmp.$RANK ", seen,
      "/$TORCHELASTIC_RESTART_COUNT.$RANK; ", then);
}

class DaemonSnapshotsE2eTest : public ClusterTest {
 protected:
  void SetUp() override {
    MakeCluster("daemon_snapshots_e2e");
    base_ = Subfolder("base");
    seen_ = Subfolder("seen");
    root_ = absl::StrCat(base_, "/elastrun-", geteuid());
    ASSERT_NO_FATAL_FAILURE(cluster_->StartService("127.0.0.1:0"));
  }

  // Starts elastrund "n1" with the test's snapshot base; returns once its
  // Watch stream is open. Registered is not enough: the daemon removes its
  // node's leftover snapshot folders after it registers and before it opens
  // the stream.
  void StartDaemon() {
    daemon_ = cluster_->StartOwnDaemon(
        {BinDir() + "/elastrund", "--rendezvous", cluster_->address(), "--node-id", "n1",
         "--slots", "2", "--state-dir", dir_ + "/state-n1", "--log-dir", dir_ + "/logs",
         "--shutdown-timeout", "10s"},
        {"ELASTRUN_SNAPSHOT_BASE=" + base_,
         "ELASTRUN_TOKEN_FILE=" + cluster_->token_file(),
         "ELASTRUN_CRED_SOCKET=" + dir_ + "/cred.sock"});
    ASSERT_NE(daemon_, nullptr);
    ASSERT_TRUE(PollUntil([&] { return cluster_->WatchingNodes() == 1; }))
        << daemon_->Output();
  }

  // `elastrun submit` of a one-node job of 2 shell workers; its id.
  std::string Submit(const std::string& script, int max_restarts) {
    return cluster_->SubmitShell("snap", 2, max_restarts, script);
  }

  std::string Seen(int restart, int rank) {
    return std::string(absl::StripTrailingAsciiWhitespace(
        testing::ReadFile(absl::StrCat(seen_, "/", restart, ".", rank))));
  }

  std::string base_, seen_, root_;
  testing::Subprocess* daemon_ = nullptr;  // the cluster's
};

TEST_F(DaemonSnapshotsE2eTest, StartingDaemonRemovesOnlyItsNodesLeftovers) {
  for (const char* folder : {"/old@n1", "/old@n2", "/run7"}) {
    ASSERT_TRUE(mkdir(root_.c_str(), 0700) == 0 || errno == EEXIST);
    ASSERT_EQ(mkdir((root_ + folder).c_str(), 0700), 0);
    ASSERT_NO_FATAL_FAILURE(Touch(root_ + folder + "/rank0.slot0"));
  }
  const std::string outside = dir_ + "/outside";
  ASSERT_EQ(mkdir(outside.c_str(), 0700), 0);
  ASSERT_NO_FATAL_FAILURE(Touch(outside + "/precious"));
  ASSERT_EQ(symlink(outside.c_str(), (root_ + "/link@n1").c_str()), 0);

  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  EXPECT_FALSE(FileExists(root_ + "/old@n1")) << daemon_->Output();
  EXPECT_THAT(
      daemon_->Output(),
      ::testing::HasSubstr("removed leftover snapshot folder " + root_ + "/old@n1"));
  EXPECT_TRUE(FileExists(root_ + "/old@n2/rank0.slot0"));  // another node's daemon
  EXPECT_TRUE(FileExists(root_ + "/run7/rank0.slot0"));    // an `elastrun run`
  EXPECT_TRUE(FileExists(root_ + "/link@n1"));             // not a folder: not ours
  EXPECT_TRUE(FileExists(outside + "/precious"));
}

TEST_F(DaemonSnapshotsE2eTest, EveryRoundSharesTheJobsFolderAndItGoesWhenTheJobEnds) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // Rank 1 fails in the first round only.
  const std::string job = Submit(
      Worker(seen_, "[ \"$RANK$TORCHELASTIC_RESTART_COUNT\" = 10 ] && exit 3; exit 0"),
      1);
  ASSERT_FALSE(job.empty());
  v1::JobStatus st = cluster_->WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << daemon_->Output();
  const std::string folder = root_ + "/" + job + "@n1";
  EXPECT_EQ(Seen(0, 1), folder + "|700");
  EXPECT_EQ(Seen(1, 0), folder + "|700");
  EXPECT_EQ(Seen(1, 1), folder + "|700");
  // The service's EndJob reaches the daemon after the job's end.
  EXPECT_TRUE(PollUntil([&] { return !FileExists(folder); })) << daemon_->Output();
}

TEST_F(DaemonSnapshotsE2eTest, CancelledJobsFolderGoes) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string job = Submit(Worker(seen_, "exec sleep 600"), 0);
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(testing::WaitForFiles(seen_, "0.", 2, kDeadline).ok()) << daemon_->Output();
  const std::string folder = root_ + "/" + job + "@n1";
  EXPECT_TRUE(IsDir(folder));
  EXPECT_TRUE(FileExists(folder + "/rank0.slot0"));
  ASSERT_TRUE(cluster_->Cancel(job));
  EXPECT_TRUE(PollUntil([&] { return !FileExists(folder); })) << daemon_->Output();
  EXPECT_EQ(cluster_->WaitFinished(job).state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(DaemonSnapshotsE2eTest, ElastrunRunKeepsALiveDaemonsFolderAndRemovesADeadOnes) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string job = Submit(
      Worker(seen_, absl::StrCat("echo $$ > ", seen_, "/p.$RANK; mv ", seen_, "/p.$RANK ",
                                 seen_, "/pid.$RANK; exec sleep 600")),
      0);
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(testing::WaitForFiles(seen_, "pid.", 2, kDeadline).ok())
      << daemon_->Output();
  const std::string folder = root_ + "/" + job + "@n1";
  ASSERT_TRUE(FileExists(folder + "/rank0.slot0"));
  // `elastrun run` of the same user, beside it.
  auto run = [&](const std::string& id) {
    absl::StatusOr<testing::RunResult> r = testing::Run(
        {BinDir() + "/elastrun", "run", "--run-id", id, "--log-dir", dir_ + "/run-logs",
         "--nproc-per-node", "1", "/bin/sh", "-c", "exit 0"},
        {marker_, "ELASTRUN_SNAPSHOT_BASE=" + base_}, kDeadline);
    EXPECT_TRUE(r.ok() && r->exit_code == 0)
        << (r.ok() ? r->output : r.status().ToString());
    return r.ok() ? r->output : "";
  };
  EXPECT_THAT(run("beside"),
              ::testing::Not(::testing::HasSubstr("removed the snapshot")));
  EXPECT_TRUE(FileExists(folder + "/rank0.slot0")) << "a live daemon's folder was taken";

  // The daemon and its workers are SIGKILLed, as on a lost machine.
  std::vector<pid_t> pids = {daemon_->pid()};
  for (int rank : {0, 1}) {
    pids.push_back(std::stoi(testing::ReadFile(absl::StrCat(seen_, "/pid.", rank))));
  }
  ASSERT_TRUE(testing::KillGroupsAsLost(pids, kDeadline));
  ASSERT_TRUE(daemon_->Wait(kDeadline).ok());
  ASSERT_TRUE(FileExists(folder + "/rank0.slot0"));
  EXPECT_THAT(run("after"),
              ::testing::HasSubstr(absl::StrCat(
                  "elastrun: removed the snapshot folder of a run that is gone: ", folder,
                  " (")));
  EXPECT_FALSE(FileExists(folder));
}

}  // namespace
}  // namespace elastrun
