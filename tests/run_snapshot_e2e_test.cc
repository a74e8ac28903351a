// End to end: the real `elastrun run` and its snapshot folder, with shell
// workers that write what they see to files; and the folder of a run whose
// launcher was SIGKILLed with its workers (a lost machine), which the next
// run removes. Every run points ELASTRUN_SNAPSHOT_BASE into the test's own
// temporary folder, so the real /dev/shm is never touched. Waits are on
// events (a process exit, files appearing through inotify) with generous
// deadlines.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using testing::BinDir;
using testing::FileExists;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using testing::ReadFile;
using testing::RunResult;
using testing::Subprocess;

constexpr absl::Duration kWait = absl::Seconds(120);

// Each worker writes "<ELASTRUN_SNAPSHOT>|<its mode>" to
// seen/<restart>.<rank>, leaves a file in the folder, then runs `then`.
std::string Worker(const std::string& seen, const std::string& then) {
  return absl::StrCat(
      "s=\"$ELASTRUN_SNAPSHOT\"; m=$([ -n \"$s\" ] && stat -c %a \"$s\"); ",
      "[ -n \"$s\" ] && echo x > \"$s/rank$RANK.slot0\"; ", "echo \"$s|$m\" > ", seen,
      "/tmp.$RANK; mv ", seen, "/tmp.$RANK ", seen,
      "/$TORCHELASTIC_RESTART_COUNT.$RANK; ", then);
}

// Then: leaves its pid in seen/pid.<rank> and sleeps (as the same process).
std::string LeavePidAndSleep(const std::string& seen) {
  return absl::StrCat("echo $$ > ", seen, "/p.$RANK; mv ", seen, "/p.$RANK ", seen,
                      "/pid.$RANK; exec sleep 600");
}

bool IsDir(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string RemovedLine(const std::string& folder) {
  return absl::StrCat(
      "elastrun: removed the snapshot folder of a run that is gone: ", folder, " (");
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
                                   const std::string& script,
                                   const std::string& run_id = "run7") {
    std::vector<std::string> argv = {
        BinDir() + "/elastrun", "run", "--run-id", run_id, "--log-dir", logs_,
        "--shutdown-timeout",   "10s"};
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
  // What worker `rank` of attempt `restart` saw (written in `seen`).
  std::string Seen(int restart, int rank, const std::string& seen) {
    return std::string(absl::StripTrailingAsciiWhitespace(
        ReadFile(absl::StrCat(seen, "/", restart, ".", rank))));
  }
  std::string Seen(int restart, int rank) { return Seen(restart, rank, seen_); }

  // Starts `argv` and waits until its worker of rank 0, which runs
  // Worker(seen, LeavePidAndSleep(seen)), is sleeping.
  std::unique_ptr<Subprocess> StartSleeping(const std::vector<std::string>& argv,
                                            const std::string& seen) {
    absl::StatusOr<std::unique_ptr<Subprocess>> run = Subprocess::Start(argv, Env());
    EXPECT_TRUE(run.ok()) << run.status();
    if (!run.ok()) return nullptr;
    absl::StatusOr<std::vector<std::string>> pid =
        testing::WaitForFiles(seen, "pid.0", 1, kWait);
    EXPECT_TRUE(pid.ok()) << pid.status() << (*run)->Output();
    return *std::move(run);
  }

  // SIGKILLs the launcher `run` and its worker whose pid is in seen/pid.0,
  // each with its process group, as a lost machine would.
  void KillAsLost(Subprocess& run, const std::string& seen) {
    const pid_t worker = std::stoi(ReadFile(seen + "/pid.0"));
    ASSERT_TRUE(testing::KillGroupsAsLost({run.pid(), worker}, kWait));
    ASSERT_TRUE(run.Wait(kWait).ok());
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
  RunResult r =
      RunOrDie(Command({"--nproc-per-node", "2", "--max-restarts", "1"},
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
  RunResult second =
      RunOrDie(Command({"--nproc-per-node", "1"}, Worker(others, "exit 0")));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_THAT(second.output, HasSubstr(folder_ + " is in use by another launcher"));
  EXPECT_EQ(ReadFile(others + "/0.0"), "|\n");
  // The first run's folder is still its own, with its worker's file.
  EXPECT_TRUE(FileExists(folder_ + "/rank0.slot0"));
  (*first)->Signal(SIGTERM);
  ASSERT_TRUE((*first)->Wait(kWait).ok());
  EXPECT_FALSE(FileExists(folder_));
}

TEST_F(RunSnapshotTest, TheNextRunRemovesTheFolderOfAKilledRunAndKeepsALiveOnes) {
  const std::string dead_seen = testing::MakeTempDir("seen_dead");
  const std::string live_seen = testing::MakeTempDir("seen_live");
  std::unique_ptr<Subprocess> dead =
      StartSleeping(Command({"--nproc-per-node", "1"},
                            Worker(dead_seen, LeavePidAndSleep(dead_seen)), "dead1"),
                    dead_seen);
  ASSERT_NE(dead, nullptr);
  std::unique_ptr<Subprocess> live =
      StartSleeping(Command({"--nproc-per-node", "1"},
                            Worker(live_seen, LeavePidAndSleep(live_seen)), "live1"),
                    live_seen);
  ASSERT_NE(live, nullptr);
  KillAsLost(*dead, dead_seen);
  ASSERT_TRUE(FileExists(root_ + "/dead1/rank0.slot0")) << "nothing to clean up";

  RunResult next =
      RunOrDie(Command({"--nproc-per-node", "1"}, Worker(seen_, "exit 0"), "next"));
  ASSERT_EQ(next.exit_code, 0) << next.output;
  EXPECT_THAT(next.output, HasSubstr(RemovedLine(root_ + "/dead1")));
  EXPECT_THAT(next.output, Not(HasSubstr("live1")));
  EXPECT_FALSE(FileExists(root_ + "/dead1"));
  EXPECT_TRUE(FileExists(root_ + "/live1/rank0.slot0"))
      << "a live run's folder was taken";
  EXPECT_THAT(testing::ListFiles(root_, ".dead-"), IsEmpty());

  live->Signal(SIGTERM);
  ASSERT_TRUE(live->Wait(kWait).ok());
  EXPECT_FALSE(FileExists(root_ + "/live1"));
}

TEST_F(RunSnapshotTest, ARestartWithTheKilledRunsIdAdoptsItsFolder) {
  std::unique_ptr<Subprocess> killed = StartSleeping(
      Command({"--nproc-per-node", "1"}, Worker(seen_, LeavePidAndSleep(seen_))), seen_);
  ASSERT_NE(killed, nullptr);
  KillAsLost(*killed, seen_);
  ASSERT_TRUE(FileExists(folder_ + "/rank0.slot0"));

  // The same id: the worker finds the file the killed one left.
  const std::string found = testing::MakeTempDir("found");
  RunResult again =
      RunOrDie(Command({"--nproc-per-node", "1"},
                       absl::StrCat("[ -e \"$ELASTRUN_SNAPSHOT/rank0.slot0\" ] && touch ",
                                    found, "/yes")));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_THAT(again.output, HasSubstr("snapshots in " + folder_));
  EXPECT_THAT(again.output, Not(HasSubstr("removed the snapshot folder")));
  EXPECT_TRUE(FileExists(found + "/yes")) << again.output;
  EXPECT_FALSE(FileExists(folder_));  // and it ended as a run does
}

TEST_F(RunSnapshotTest, TheNextRunRemovesTheFolderOfAKilledMultinodeRun) {
  const std::string token = testing::WriteOwnerOnlyFile(
      testing::MakeTempDir("token") + "/token", absl::StrCat("t0ken-", getpid(), "\n"));
  ASSERT_FALSE(token.empty());
  // One node of 1 to 2, hosting its rendezvous: its folder is the job's on
  // this node, named by the node (host name and the launcher's pid).
  auto multinode = [&](const std::string& id, const std::string& seen,
                       const std::string& then) {
    const int port = testing::FreeLoopbackPort();
    EXPECT_GT(port, 0);
    return std::vector<std::string>{
        BinDir() + "/elastrun",
        "run",
        "--nnodes",
        "1:2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        absl::StrCat("127.0.0.1:", port),
        "--rdzv-id",
        id,
        "--rdzv-conf",
        absl::StrCat("token_file=", token, ",is_host=1,last_call_timeout=0.1"),
        "--log-dir",
        logs_,
        "--shutdown-timeout",
        "10s",
        "--no-python",
        "/bin/sh",
        "-c",
        Worker(seen, then)};
  };
  const std::string dead_seen = testing::MakeTempDir("seen_dead");
  std::unique_ptr<Subprocess> dead = StartSleeping(
      multinode("mn-dead", dead_seen, LeavePidAndSleep(dead_seen)), dead_seen);
  ASSERT_NE(dead, nullptr);
  const std::string folder(absl::StripSuffix(Seen(0, 0, dead_seen), "|700"));
  ASSERT_TRUE(absl::StartsWith(folder, root_ + "/")) << folder;
  ASSERT_THAT(folder, HasSubstr("@"));
  KillAsLost(*dead, dead_seen);
  ASSERT_TRUE(FileExists(folder + "/rank0.slot0")) << "nothing to clean up";

  RunResult next = RunOrDie(multinode("mn-next", seen_, "exit 0"));
  ASSERT_EQ(next.exit_code, 0) << next.output;
  EXPECT_THAT(next.output, HasSubstr(RemovedLine(folder)));
  EXPECT_FALSE(FileExists(folder));
  EXPECT_THAT(testing::ListFiles(root_), IsEmpty())
      << "the next run's folder outlived it";
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
