// cgroup.h: finding this process's cgroup v2 from (fake) proc files, and on
// the real cgroup file system: processes moved in by the spawn path, killed
// as a whole (cgroup.kill and the freeze-and-kill fallback), leftovers of an
// earlier launcher, the unprivileged fallback, and an agent whose attempt's
// escaped grandchild dies with the attempt. Tests that need a writable
// cgroup2 skip, saying so, where there is none.
#include "launcher/agent/cgroup.h"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/cgroup_reaper.h"
#include "launcher/agent/process.h"
#include "launcher/agent/standby_pool.h"
#include "launcher/agent/test_specs.h"

namespace elastrun::launcher {
namespace {

using ::testing::HasSubstr;

// Files for FindOwnCgroup, in a fresh folder.
class FakeProc {
 public:
  FakeProc() {
    char dir[] = "/tmp/cgroup-test-XXXXXX";
    dir_ = mkdtemp(dir);
  }
  ~FakeProc() {
    unlink(sources_.mountinfo.c_str());
    unlink(sources_.self_cgroup.c_str());
    rmdir(dir_.c_str());
  }
  const CgroupSources& Write(const std::string& mountinfo, const std::string& cgroup) {
    sources_.mountinfo = dir_ + "/mountinfo";
    sources_.self_cgroup = dir_ + "/cgroup";
    std::ofstream(sources_.mountinfo) << mountinfo;
    std::ofstream(sources_.self_cgroup) << cgroup;
    return sources_;
  }

 private:
  std::string dir_;
  CgroupSources sources_;
};

constexpr char kV1Lines[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n";

TEST(FindOwnCgroupTest, HybridMachineJoinsTheUnifiedMountAndTheZeroLine) {
  FakeProc proc;
  auto dir = FindOwnCgroup(proc.Write(
      absl::StrCat(kV1Lines,
                   "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"),
      "4:memory:/x\n0::/user.slice/session-1.scope\n"));
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, "/sys/fs/cgroup/unified/user.slice/session-1.scope");
}

TEST(FindOwnCgroupTest, PureV2RootCgroupIsTheMountItself) {
  FakeProc proc;
  auto dir = FindOwnCgroup(proc.Write(
      "25 1 0:22 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n", "0::/\n"));
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, "/sys/fs/cgroup");
}

TEST(FindOwnCgroupTest, MountOfASubtreeAndAnEscapedMountPoint) {
  FakeProc proc;
  auto dir = FindOwnCgroup(
      proc.Write("41 31 0:38 /a /mnt/my\\040cg rw - cgroup2 none rw\n", "0::/a/b\n"));
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, "/mnt/my cg/b");
  auto outside = FindOwnCgroup(
      proc.Write("41 31 0:38 /a /mnt/cg rw - cgroup2 none rw\n", "0::/other\n"));
  EXPECT_THAT(outside.status().message(), HasSubstr("outside the cgroup2 mount"));
}

TEST(FindOwnCgroupTest, CgroupV1OnlyOrNoZeroLineSaysWhy) {
  FakeProc proc;
  auto v1 = FindOwnCgroup(proc.Write(kV1Lines, "1:cpu:/\n"));
  EXPECT_EQ(v1.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(v1.status().message(), HasSubstr("no cgroup2 file system is mounted"));
  auto no_line = FindOwnCgroup(
      proc.Write("41 31 0:38 / /cg rw - cgroup2 cgroup2 rw\n", "1:cpu:/\n"));
  EXPECT_THAT(no_line.status().message(), HasSubstr("no \"0::\" line"));
}

TEST(CgroupNamePartTest, KeepsSafeCharactersOnly) {
  EXPECT_EQ(CgroupNamePart("node-1.a_b"), "node-1.a_b");
  EXPECT_EQ(CgroupNamePart("../x/y z"), ".._x_y_z");
}

TEST(KillCgroupTest, MissingFolderIsNothingToDo) {
  auto killed = KillCgroup("/nonexistent/cgroup/folder");
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 0);
}

// A process is dead once it is gone or a zombie (its parent may be init).
bool Dead(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return true;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

// The cgroup v2 path of `pid`, from /proc.
std::string CgroupOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

// Tests on the real cgroup file system, each under a folder of its own.
class RealCgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto own = LauncherCgroup::Create(absl::StrCat("test-", getpid()), false);
    if (!own.ok()) {
      GTEST_SKIP() << "cgroup v2 is not usable here (" << own.status().message()
                   << "); the launcher falls back to process groups";
    }
    own_ = *std::move(own);
  }
  void TearDown() override {
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    own_.reset();  // kills and removes everything under it
  }

  // Starts `script` under /bin/sh in cgroup `dir` through the spawn path;
  // returns the pid the script prints first ($! of its grandchild).
  std::pair<pid_t, pid_t> SpawnWithGrandchild(const std::string& dir) {
    auto fd = OpenCgroupProcs(dir);
    EXPECT_TRUE(fd.ok()) << fd.status();
    ProcessSpec spec;
    // The grandchild leaves the process group: only its cgroup holds it.
    spec.argv = {"/bin/sh", "-c", "setsid sleep 1000 & echo $!; exec sleep 1000"};
    spec.env = {"PATH=/usr/bin:/bin"};
    spec.cgroup_procs_fd = fd.ok() ? *fd : -1;
    auto spawned = processes_->Spawn(spec);
    if (fd.ok()) close(*fd);
    EXPECT_TRUE(spawned.ok()) << spawned.status();
    if (!spawned.ok()) return {-1, -1};
    children_.push_back(spawned->pid);
    char buf[32] = {0};
    fcntl(spawned->stdout_fd, F_SETFL, 0);  // blocking: the line comes at once
    EXPECT_GT(read(spawned->stdout_fd, buf, sizeof buf - 1), 0);
    close(spawned->stdout_fd);
    close(spawned->stderr_fd);
    int grandchild = -1;
    EXPECT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(buf), &grandchild)) << buf;
    return {spawned->pid, grandchild};
  }

  void KillsChildAndEscapedGrandchild(KillOptions options) {
    const std::string dir = own_->dir() + "/attempt-1";
    ASSERT_TRUE(MakeCgroup(dir).ok());
    auto [child, grandchild] = SpawnWithGrandchild(dir);
    ASSERT_GT(grandchild, 0);
    const std::string rel = CgroupOf(child);
    EXPECT_THAT(dir, ::testing::EndsWith(rel));
    EXPECT_EQ(CgroupOf(grandchild), rel);
    EXPECT_EQ(CgroupProcesses(dir).size(), 2u);

    auto killed = KillCgroup(dir, options);
    ASSERT_TRUE(killed.ok()) << killed.status();
    EXPECT_EQ(*killed, 2);
    EXPECT_TRUE(Dead(child));
    EXPECT_TRUE(Dead(grandchild)) << "the grandchild outside the process group died too";
    struct stat st;
    EXPECT_NE(stat(dir.c_str(), &st), 0) << dir << " was removed";
  }

  std::unique_ptr<LauncherCgroup> own_;
  std::unique_ptr<ProcessControl> processes_ = NewPosixProcessControl();
  std::vector<pid_t> children_;
};

TEST_F(RealCgroupTest, KillFileKillsEveryProcessAndRemovesTheFolder) {
  KillsChildAndEscapedGrandchild(KillOptions{});
}

TEST_F(RealCgroupTest, FreezeAndKillFallbackDoesTheSame) {
  KillOptions options;
  options.use_kill_file = false;
  KillsChildAndEscapedGrandchild(options);
}

TEST_F(RealCgroupTest, ProcessesMoveBetweenCgroups) {
  const std::string from = own_->dir() + "/standby-1";
  const std::string to = own_->dir() + "/attempt-1";
  ASSERT_TRUE(MakeCgroup(from).ok());
  ASSERT_TRUE(MakeCgroup(to).ok());
  EXPECT_FALSE(MakeCgroup(to).ok()) << "an existing folder is an error";
  auto [child, grandchild] = SpawnWithGrandchild(from);
  ASSERT_GT(grandchild, 0);
  ASSERT_TRUE(MoveCgroupProcesses(from, to).ok());
  EXPECT_TRUE(CgroupProcesses(from).empty());
  EXPECT_EQ(CgroupProcesses(to).size(), 2u);
}

// A pid that no process has now: a child that exited and was reaped.
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

TEST_F(RealCgroupTest, NextLauncherOfTheSameNameKillsWhatADeadOneLeft) {
  // A dead launcher's folder with processes in it, as a SIGKILLed daemon
  // leaves it (its workers' children), and one of a live launcher of the
  // same name (this program, forked: the same name and program).
  const std::string name = absl::StrCat("test-left-", getpid());
  auto own = FindOwnCgroup();
  ASSERT_TRUE(own.ok());
  const std::string old_dir = absl::StrCat(*own, "/elastrun-", name, "@", DeadPid());
  ASSERT_TRUE(MakeCgroup(old_dir).ok());
  ASSERT_TRUE(MakeCgroup(old_dir + "/attempt-3").ok());
  auto [child, grandchild] = SpawnWithGrandchild(old_dir + "/attempt-3");
  ASSERT_GT(grandchild, 0);
  int hold[2];
  ASSERT_EQ(pipe(hold), 0);
  const pid_t live = fork();
  if (live == 0) {
    char c;
    close(hold[1]);
    _exit(static_cast<int>(read(hold[0], &c, 1)));  // until the test ends
  }
  close(hold[0]);
  children_.push_back(live);
  const std::string live_dir = absl::StrCat(*own, "/elastrun-", name, "@", live);
  ASSERT_TRUE(MakeCgroup(live_dir).ok());
  auto [live_child, live_grandchild] = SpawnWithGrandchild(live_dir);
  ASSERT_GT(live_grandchild, 0);

  auto next = LauncherCgroup::Create(name, /*kill_leftovers=*/true);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ((*next)->dir(), absl::StrCat(*own, "/elastrun-", name, "@", getpid()));
  EXPECT_EQ((*next)->leftovers(), 2);
  EXPECT_TRUE(Dead(child));
  EXPECT_TRUE(Dead(grandchild));
  EXPECT_FALSE(Dead(live_grandchild)) << "a live launcher's processes are left alone";
  EXPECT_TRUE(CgroupProcesses((*next)->dir()).empty());
  const std::string dir = (*next)->dir();
  next->reset();
  struct stat st;
  EXPECT_NE(stat(dir.c_str(), &st), 0) << "the launcher's folder goes with it";
  EXPECT_NE(stat(old_dir.c_str(), &st), 0) << "the dead one's too";
  ASSERT_TRUE(KillCgroup(live_dir).ok());
  close(hold[1]);

  auto fresh = LauncherCgroup::Create(name + "-new", /*kill_leftovers=*/true);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)->leftovers(), -1) << "no earlier folder";
}

TEST_F(RealCgroupTest, UnprivilegedLauncherIsRefusedWithAReason) {
  const passwd* nobody = getpwnam("nobody");
  if (nobody == nullptr || getuid() != 0) GTEST_SKIP() << "needs root and a user nobody";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    if (setgid(nobody->pw_gid) != 0 || setuid(nobody->pw_uid) != 0) _exit(2);
    auto made = LauncherCgroup::Create("test-nobody", false);
    const std::string text = made.ok() ? "OK" : std::string(made.status().message());
    (void)!write(fds[1], text.data(), text.size());
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, n);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(text, "OK");
  EXPECT_THAT(text, HasSubstr("Permission denied"));
}

TEST_F(RealCgroupTest, ReaperKillsTheCgroupOnceThePipeCloses) {
  const std::string dir = own_->dir() + "/attempt-1";
  ASSERT_TRUE(MakeCgroup(dir).ok());
  auto reaper = CgroupReaper::Start(own_->dir());
  ASSERT_TRUE(reaper.ok()) << reaper.status();
  auto [child, grandchild] = SpawnWithGrandchild(dir);
  ASSERT_GT(grandchild, 0);
  EXPECT_FALSE(Dead(grandchild));
  EXPECT_EQ(CgroupOf((*reaper)->pid()), CgroupOf(getpid())) << "outside what it kills";
  // As when the launcher dies: its end of the pipe closes.
  reaper->reset();
  EXPECT_TRUE(Dead(child));
  EXPECT_TRUE(Dead(grandchild));
  struct stat st;
  EXPECT_NE(stat(own_->dir().c_str(), &st), 0) << "removed";
}

TEST_F(RealCgroupTest, StandbySetHasItsOwnCgroupAndDiscardKillsAllOfIt) {
  StandbyPool pool(processes_.get(), own_->dir());
  pool.Fill({"/bin/sh", "-c", "setsid sleep 1000 & echo $!; exec sleep 1000"},
            {"PATH=/usr/bin:/bin"}, 2);
  ASSERT_EQ(pool.set().workers.size(), 2u);
  const std::string dir = pool.set().cgroup;
  EXPECT_EQ(dir, own_->dir() + "/standby-1");
  // Both standbys and their escaped children (each prints its child's pid).
  std::vector<pid_t> pids;
  for (const StandbyWorker& w : pool.set().workers) {
    pids.push_back(w.pid);
    char buf[32] = {0};
    fcntl(w.stdout_fd, F_SETFL, 0);  // blocking: the line comes at once
    ASSERT_GT(read(w.stdout_fd, buf, sizeof buf - 1), 0);
    int pid;
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(buf), &pid)) << buf;
    pids.push_back(pid);
  }
  std::vector<pid_t> in_cgroup = CgroupProcesses(dir);
  EXPECT_THAT(in_cgroup, ::testing::UnorderedElementsAreArray(pids));
  pool.Discard();
  for (pid_t pid : pids) EXPECT_TRUE(Dead(pid)) << pid;
  struct stat st;
  EXPECT_NE(stat(dir.c_str(), &st), 0) << dir << " is removed";
}

// The agent with a launcher cgroup: the attempt's escaped grandchild dies
// when the attempt is stopped, and the attempt's folder is gone after.
TEST_F(RealCgroupTest, StoppedAttemptKillsItsCgroupAndRemovesIt) {
  AgentOptions options;
  options.cgroup = own_->dir();
  options.grace = absl::Seconds(10);
  auto agent = Agent::Create(options);
  ASSERT_TRUE(agent.ok()) << agent.status();
  AttemptSpec spec = testing::ShellAttempt(
      {"{ setsid sh -c 'echo $$; exec sleep 1000' & } | { read p; echo $p; }; exec sleep 1000"});
  std::optional<pid_t> escaped;
  spec.on_output_line = [&escaped](const OutputLine& line) {
    int pid;
    if (absl::SimpleAtoi(line.text, &pid)) escaped = pid;
  };
  std::optional<absl::StatusOr<AttemptOutcome>> outcome;
  const Agent::AttemptId id =
      (*agent)->Start(std::move(spec), [&](auto o) { outcome = std::move(o); });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!escaped && absl::Now() < deadline) ASSERT_TRUE((*agent)->Poll(absl::Seconds(1)).ok());
  ASSERT_TRUE(escaped.has_value());
  const std::string attempt_dir = absl::StrCat(own_->dir(), "/attempt-", id);
  EXPECT_THAT(attempt_dir, ::testing::EndsWith(CgroupOf(*escaped)));

  (*agent)->Stop(id, SIGTERM);
  while (!outcome && absl::Now() < deadline) ASSERT_TRUE((*agent)->Poll(absl::Seconds(1)).ok());
  ASSERT_TRUE(outcome.has_value());
  ASSERT_TRUE(outcome->ok()) << outcome->status();
  EXPECT_EQ((*outcome)->kind, AttemptOutcome::Kind::kStopped);
  EXPECT_TRUE(Dead(*escaped)) << "the grandchild in a session of its own died with the attempt";
  struct stat st;
  EXPECT_NE(stat(attempt_dir.c_str(), &st), 0) << attempt_dir << " is removed";
  // The killed orphan was re-parented to this process (the agent is a
  // subreaper): the agent reaps it.
  while (kill(*escaped, 0) == 0 && absl::Now() < deadline) {
    ASSERT_TRUE((*agent)->Poll(absl::Milliseconds(100)).ok());
  }
  EXPECT_NE(kill(*escaped, 0), 0) << "reaped";
}

}  // namespace
}  // namespace elastrun::launcher
