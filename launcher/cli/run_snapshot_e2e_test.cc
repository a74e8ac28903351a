// End to end: the real `elastrun run` and its snapshot folder, with shell
// workers that write what they see to files. Every run points
// ELASTRUN_SNAPSHOT_BASE into the test's own temporary folder, so the real
// /dev/shm is never touched. Waits are on events (a process exit, files
// appearing through inotify) with generous deadlines.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using ::testing::HasSubstr;
using testing::BinDir;
using testing::FileExists;
using testing::ReadFile;
using testing::RunResult;

constexpr absl::Duration kWait = absl::Seconds(120);

// Each worker writes "<ELASTRUN_SNAPSHOT>|<its mode>" to
// seen/<restart>.<rank>, leaves a file in the folder, then runs `then`.
std::string Worker(const std::string& seen, const std::string& then) {
  return absl::StrCat(
      "s=\"$ELASTRUN_SNAPSHOT\"; m=$([ -n \"$s\" ] && stat -c %a \"$s\"); ",
      "[ -n \"$s\" ] && echo x > \"$s/rank$RANK.slot0\"; ",
      "echo \"$s|$m\" > ", seen, "/tmp.$RANK; mv ", seen, "/tmp.$RANK ", seen,
      "/$TORCHELASTIC_RESTART_COUNT.$RANK; ", then);
}

bool IsDir(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

class RunSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = testing::MakeTempDir("snapshot_base");
    seen_ = testing::MakeTempDir("seen");
    logs_ = testing::MakeTempDir("logs");
    root_ = absl::StrCat(base_, "/elastrun-", geteuid());
    folder_ = root_ + "/run7";
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=", seen_);
  }
  void TearDown() override {
    EXPECT_THAT(testing::ProcessesWithEnv(marker_), ::testing::IsEmpty())
        << "processes were left behind";
  }

  std::vector<std::string> Command(const std::vector<std::string>& flags,
                                   const std::string& script) {
    std::vector<std::string> argv = {BinDir() + "/elastrun", "run", "--run-id", "run7",
                                     "--log-dir", logs_, "--shutdown-timeout", "10s"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"/bin/sh", "-c", script});
    return argv;
  }
  std::vector<std::string> Env() const {
    return {marker_, "ELASTRUN_SNAPSHOT_BASE=" + base_};
  }
  RunResult RunOrDie(const std::vector<std::string>& argv) {
    absl::StatusOr<RunResult> r = testing::Run(argv, Env(), kWait);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{};
  }
  // What worker `rank` of attempt `restart` saw.
  std::string Seen(int restart, int rank) {
    return std::string(absl::StripTrailingAsciiWhitespace(
        ReadFile(absl::StrCat(seen_, "/", restart, ".", rank))));
  }

  std::string base_, seen_, logs_, root_, folder_, marker_;
};

TEST_F(RunSnapshotTest, EveryAttemptSharesTheFolderAndItIsGoneAfterSuccess) {
  // Rank 1 fails in the first attempt only.
  RunResult r = RunOrDie(Command(
      {"--nproc-per-node", "2", "--max-restarts", "2"},
      Worker(seen_, "[ \"$RANK$TORCHELASTIC_RESTART_COUNT\" = 10 ] && exit 3; exit 0")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("snapshots in " + folder_));
  // (Rank 0 of the first attempt may be stopped before it writes.)
  EXPECT_EQ(Seen(0, 1), folder_ + "|700");
  EXPECT_EQ(Seen(1, 0), folder_ + "|700");
  EXPECT_EQ(Seen(1, 1), folder_ + "|700");
  EXPECT_FALSE(FileExists(folder_)) << "the run's folder outlived it";
  EXPECT_TRUE(IsDir(root_));  // shared by this user's runs: it stays
}

TEST_F(RunSnapshotTest, FolderIsGoneAfterFailure) {
  // Rank 1 fails in every attempt (rank 0 waits to be stopped).
  RunResult r = RunOrDie(
      Command({"--nproc-per-node", "2", "--max-restarts", "1"},
              Worker(seen_, "[ \"$RANK\" = 1 ] && exit 4; exec sleep 600")));
  ASSERT_EQ(r.exit_code, 4) << r.output;
  EXPECT_EQ(Seen(0, 1), folder_ + "|700");
  EXPECT_EQ(Seen(1, 1), folder_ + "|700");
  EXPECT_FALSE(FileExists(folder_));
}

TEST_F(RunSnapshotTest, FolderIsGoneAfterAStopSignal) {
  for (int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(sig);
    absl::StatusOr<std::unique_ptr<testing::Subprocess>> run = testing::Subprocess::Start(
        Command({"--nproc-per-node", "2"}, Worker(seen_, "exec sleep 600")), Env());
    ASSERT_TRUE(run.ok()) << run.status();
    absl::StatusOr<std::vector<std::string>> both =
        testing::WaitForFiles(seen_, "0.", 2, kWait);
    ASSERT_TRUE(both.ok()) << both.status() << (*run)->Output();
    // While the workers run the folder is there, owner-only, with their files.
    EXPECT_TRUE(IsDir(folder_));
    EXPECT_TRUE(FileExists(folder_ + "/rank1.slot0"));
    (*run)->Signal(sig);
    ASSERT_TRUE((*run)->Wait(kWait).ok());
    EXPECT_EQ((*run)->exit_code(), 128 + sig) << (*run)->Output();
    EXPECT_FALSE(FileExists(folder_));
    for (const std::string& f : *both) unlink((seen_ + "/" + f).c_str());
  }
}

TEST_F(RunSnapshotTest, ASecondRunWithTheSameIdKeepsOutOfTheFirstOnesFolder) {
  absl::StatusOr<std::unique_ptr<testing::Subprocess>> first = testing::Subprocess::Start(
      Command({"--nproc-per-node", "1"}, Worker(seen_, "exec sleep 600")), Env());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(testing::WaitForFiles(seen_, "0.0", 1, kWait).ok()) << (*first)->Output();
  const std::string others = testing::MakeTempDir("seen_second");
  RunResult second = RunOrDie(Command({"--nproc-per-node", "1"}, Worker(others, "exit 0")));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_THAT(second.output, HasSubstr(folder_ + " is in use by another launcher"));
  EXPECT_EQ(ReadFile(others + "/0.0"), "|\n");
  // The first run's folder is still its own, with its worker's file.
  EXPECT_TRUE(FileExists(folder_ + "/rank0.slot0"));
  (*first)->Signal(SIGTERM);
  ASSERT_TRUE((*first)->Wait(kWait).ok());
  EXPECT_FALSE(FileExists(folder_));
}

TEST_F(RunSnapshotTest, PlantedSymlinkIsRefusedAndNothingIsWrittenThroughIt) {
  const std::string target = testing::MakeTempDir("symlink_target");
  ASSERT_EQ(mkdir(root_.c_str(), 0700), 0);
  ASSERT_EQ(symlink(target.c_str(), folder_.c_str()), 0);
  RunResult r = RunOrDie(Command({"--nproc-per-node", "2"}, Worker(seen_, "exit 0")));
  ASSERT_EQ(r.exit_code, 0) << r.output;  // not fatal: the workers run without
  EXPECT_THAT(r.output, HasSubstr("warning: workers run without ELASTRUN_SNAPSHOT"));
  EXPECT_THAT(r.output, HasSubstr(folder_ + " is a symlink"));
  EXPECT_EQ(Seen(0, 0), "|");
  EXPECT_EQ(Seen(0, 1), "|");
  EXPECT_TRUE(testing::ListFiles(target).empty());
  struct stat st;
  EXPECT_EQ(lstat(folder_.c_str(), &st), 0) << "the planted link was removed";
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST_F(RunSnapshotTest, NoSnapshotsMeansNoFolderAndNoVariable) {
  RunResult r = RunOrDie(Command({"--no-snapshots"}, Worker(seen_, "exit 0")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Seen(0, 0), "|");
  EXPECT_FALSE(FileExists(root_));
}

}  // namespace
}  // namespace elastrun
