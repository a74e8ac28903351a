// The Daemon's snapshot folders (one per job on this node) with the fake
// service and runner, on the real file system under the test's own base:
// made at the job's first attempt, the same in every round, removed once the
// job ended here and its attempt is over; and a starting daemon's removal of
// its node's leftovers.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/daemon/daemon.h"
#include "launcher/daemon/daemon_fakes.h"
#include "launcher/daemon/job_snapshots.h"
#include "tests/testing/subprocess.h"

namespace elastrun::launcher {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Not;

bool IsOwnerOnlyDir(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700;
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

void Touch(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  std::fclose(f);
}

class DaemonSnapshotsTest : public ::testing::Test {
 protected:
  DaemonSnapshotsTest() {
    base_ = testing::MakeTempDir("daemon_snapshots");
    root_ = absl::StrCat(base_, "/elastrun-", geteuid());
    DaemonOptions o;
    o.node_id = "b";
    o.log_dir = testing::MakeTempDir("daemon_snapshots_logs");
    o.base_env = {"ELASTRUN_SNAPSHOT=/inherited"};
    o.slots = 4;
    o.snapshot_base = base_;
    daemon_ = std::make_unique<Daemon>(o, &client_, &runner_);
    runner_.after_finish = [this] { Settle(*daemon_); };
  }

  // One Watch command, then its service calls.
  void Do(const v1::Command& command) {
    daemon_->OnCommand(command);
    Settle(*daemon_);
  }

  // ELASTRUN_SNAPSHOT of every worker of the n-th attempt started.
  std::vector<std::string> SnapshotEnv(size_t n) {
    std::vector<std::string> out;
    for (const WorkerSpec& w : runner_.started.at(n).spec.workers) {
      for (const std::string& e : w.process.env) {
        if (e.rfind("ELASTRUN_SNAPSHOT=", 0) == 0) out.push_back(e);
      }
    }
    return out;
  }

  std::string base_, root_;
  FakeClient client_;
  FakeRunner runner_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DaemonSnapshotsTest, OneFolderForEveryRoundRemovedWhenTheJobEndsAndItsAttemptIsOver) {
  const std::string folder = root_ + "/j-1@b";
  const std::string var = "ELASTRUN_SNAPSHOT=" + folder;
  Do(Start("j-1", 0));
  ASSERT_EQ(runner_.started.size(), 1u);
  EXPECT_THAT(SnapshotEnv(0), ElementsAre(var, var));
  EXPECT_TRUE(IsOwnerOnlyDir(folder));
  Touch(folder + "/rank2.slot0");

  // A failure and the next round: the same folder, with what was written.
  runner_.Finish(Killed(2, SIGKILL));
  EXPECT_TRUE(Exists(folder + "/rank2.slot0"));
  Do(Start("j-1", 1));
  ASSERT_EQ(runner_.started.size(), 2u);
  EXPECT_THAT(SnapshotEnv(1), ElementsAre(var, var));

  // The job ends while its workers still stop: the folder waits for them.
  Do(End("j-1"));
  EXPECT_TRUE(Exists(folder + "/rank2.slot0"));
  runner_.Finish(Stopped());
  EXPECT_FALSE(Exists(folder));
  EXPECT_TRUE(Exists(root_));
}

TEST_F(DaemonSnapshotsTest, EachJobHasItsOwnFolderAndOneEndingLeavesTheOthers) {
  Do(Start("j-1", 0, 1));
  Do(Start("j-2", 0, 1));
  ASSERT_EQ(runner_.started.size(), 2u);
  EXPECT_THAT(SnapshotEnv(0), ElementsAre("ELASTRUN_SNAPSHOT=" + root_ + "/j-1@b"));
  EXPECT_THAT(SnapshotEnv(1), ElementsAre("ELASTRUN_SNAPSHOT=" + root_ + "/j-2@b"));
  // j-1 succeeded; the service ends it with no attempt left running here.
  runner_.Finish(runner_.started[0].id, Succeeded());
  EXPECT_TRUE(Exists(root_ + "/j-1@b"));  // until the job ends: a round may follow
  Do(End("j-1"));
  EXPECT_FALSE(Exists(root_ + "/j-1@b"));
  EXPECT_TRUE(IsOwnerOnlyDir(root_ + "/j-2@b"));
  // An EndJob for a job never run here touches nothing.
  Do(End("j-9"));
  EXPECT_TRUE(IsOwnerOnlyDir(root_ + "/j-2@b"));
}

TEST_F(DaemonSnapshotsTest, ShutdownRemovesEveryFolderOnceItsAttemptIsOver) {
  Do(Start("j-1", 0, 1));
  Do(Start("j-2", 0, 1));
  runner_.Finish(runner_.started[0].id, Killed(0, SIGKILL));  // j-1 between rounds
  daemon_->Shutdown(SIGTERM);
  EXPECT_FALSE(Exists(root_ + "/j-1@b"));
  EXPECT_TRUE(Exists(root_ + "/j-2@b"));
  runner_.Finish(runner_.started[1].id, Stopped());
  EXPECT_FALSE(Exists(root_ + "/j-2@b"));
  EXPECT_TRUE(daemon_->WaitIdle(absl::Seconds(10)));
}

TEST_F(DaemonSnapshotsTest, PlantedSymlinkIsRefusedAndWorkersRunWithoutTheVariable) {
  const std::string target = testing::MakeTempDir("daemon_snapshots_target");
  ASSERT_EQ(mkdir(root_.c_str(), 0700), 0);
  ASSERT_EQ(symlink(target.c_str(), (root_ + "/j-1@b").c_str()), 0);
  Do(Start("j-1", 0));
  ASSERT_EQ(runner_.started.size(), 1u);  // not fatal
  EXPECT_TRUE(SnapshotEnv(0).empty());  // nor the daemon's own inherited one
  EXPECT_TRUE(testing::ListFiles(target).empty());
  Do(End("j-1"));
  runner_.Finish(Stopped());
  EXPECT_TRUE(Exists(root_ + "/j-1@b")) << "the planted link is not ours to remove";
}

TEST(JobSnapshotsTest, LeftoversOfThisNodeGoAndEverythingElseStays) {
  const std::string base = testing::MakeTempDir("job_snapshots");
  const std::string root = absl::StrCat(base, "/elastrun-", geteuid());
  JobSnapshots other_node(base, "n2");
  auto node = std::make_unique<JobSnapshots>(base, "n1");
  ASSERT_FALSE(node->FolderFor("old").empty());
  Touch(root + "/old@n1/rank0.slot0");
  ASSERT_FALSE(other_node.FolderFor("old").empty());
  ASSERT_EQ(mkdir((root + "/run7").c_str(), 0700), 0);  // an `elastrun run`'s
  Touch(root + "/file@n1");
  // A daemon of n1 that still runs holds its folder.
  JobSnapshots alive(base, "n1");
  ASSERT_FALSE(alive.FolderFor("busy").empty());

  // A new daemon of n1 (the old one died without cleaning up) with one job.
  node.reset();
  JobSnapshots restarted(base, "n1");
  const std::string live = restarted.FolderFor("live");
  EXPECT_EQ(live, root + "/live@n1");
  absl::StatusOr<std::vector<std::string>> removed = restarted.RemoveLeftovers();
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, ElementsAre(root + "/old@n1"));
  EXPECT_FALSE(Exists(root + "/old@n1"));
  EXPECT_TRUE(Exists(live));
  EXPECT_TRUE(Exists(root + "/busy@n1"));
  EXPECT_TRUE(Exists(root + "/old@n2"));
  EXPECT_TRUE(Exists(root + "/run7"));
  EXPECT_TRUE(Exists(root + "/file@n1"));

  // Names are sanitized: a job id cannot reach out of the folder.
  EXPECT_THAT(restarted.FolderName("../x"), Not(Contains('/')));
  EXPECT_EQ(restarted.FolderName("j-1"), "j-1@n1");
  // Without a base there are no folders.
  JobSnapshots none("", "n1");
  EXPECT_EQ(none.FolderFor("j"), "");
}

TEST(JobSnapshotsTest, RootRemovesTheLeftoversOfTheOwnersItRanJobsFor) {
  if (geteuid() != 0) GTEST_SKIP() << "only a root daemon runs other users' jobs";
  const std::string base = testing::MakeTempDir("job_snapshots_owners");
  const std::string theirs = absl::StrCat(base, "/elastrun-4242");
  auto node = std::make_unique<JobSnapshots>(base, "n1");
  ASSERT_EQ(node->FolderFor("old", 4242, 4242), theirs + "/old@n1");
  JobSnapshots other_node(base, "n2");
  ASSERT_FALSE(other_node.FolderFor("old", 4242, 4242).empty());
  node.reset();  // died: its folder is no longer held
  // A folder named like a user's root that the user does not own is not one.
  const std::string fake = absl::StrCat(base, "/elastrun-4243");
  ASSERT_EQ(mkdir(fake.c_str(), 0700), 0);
  ASSERT_EQ(mkdir((fake + "/old@n1").c_str(), 0700), 0);

  JobSnapshots restarted(base, "n1");
  const std::string live = restarted.FolderFor("live", 4242, 4242);
  absl::StatusOr<std::vector<std::string>> removed = restarted.RemoveLeftovers();
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, ElementsAre(theirs + "/old@n1"));
  EXPECT_TRUE(Exists(live));
  EXPECT_TRUE(Exists(theirs + "/old@n2"));
  EXPECT_TRUE(Exists(fake + "/old@n1"));
}

}  // namespace
}  // namespace elastrun::launcher
