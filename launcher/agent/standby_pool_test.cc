#include "launcher/agent/standby_pool.h"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

// glibc 2.36's pidfd_open lacks extern "C" in C++.
int PidFd(pid_t pid, unsigned flags) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, flags));
}

const std::vector<std::string> kArgv = {"/bin/sh", "-c", "exec sleep 60"};
const std::vector<std::string> kEnv = {"PATH=/usr/bin:/bin"};

bool Alive(pid_t pid) { return kill(pid, 0) == 0; }

class StandbyPoolTest : public ::testing::Test {
 protected:
  std::unique_ptr<ProcessControl> processes_ = NewPosixProcessControl();
};

TEST_F(StandbyPoolTest, HandsTheSetOnlyToTheSameProgram) {
  StandbyPool pool(processes_.get());
  pool.Fill(kArgv, kEnv, 2);
  ASSERT_FALSE(pool.empty());
  EXPECT_FALSE(pool.Take({"/bin/true"}, kEnv, 2).has_value());
  EXPECT_FALSE(pool.Take(kArgv, kEnv, 3).has_value());
  auto set = pool.Take(kArgv, kEnv, 2);
  ASSERT_TRUE(set.has_value());
  EXPECT_TRUE(pool.empty());
  ASSERT_EQ(set->workers.size(), 2u);
  EXPECT_EQ(set->pgid, set->workers[0].pid) << "one group of their own";
  // The taker owns them now: end them as an attempt would.
  ASSERT_TRUE(processes_->SignalGroup(set->pgid, SIGKILL).ok());
  for (const StandbyWorker& w : set->workers) {
    for (int fd : {w.control, w.stdout_fd, w.stderr_fd}) close(fd);
    int status;
    EXPECT_EQ(waitpid(w.pid, &status, 0), w.pid);
  }
}

// The first line `fd` carries, read with a generous deadline.
std::string FirstLine(int fd) {
  std::string line;
  char c = 0;
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 60000) == 1 && read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

TEST_F(StandbyPoolTest, EachStandbyKnowsTheLocalRankItWillBecome) {
  StandbyPool pool(processes_.get());
  pool.Fill({"/bin/sh", "-c", "echo \"$ELASTRUN_STANDBY_LOCAL_RANK\"; exec sleep 60"}, kEnv,
            3);
  auto set = pool.Take({"/bin/sh", "-c", "echo \"$ELASTRUN_STANDBY_LOCAL_RANK\"; exec sleep 60"},
                       kEnv, 3);
  ASSERT_TRUE(set.has_value());
  // The i-th is activated as local rank i (AttemptRun::AdoptStandbys).
  for (size_t i = 0; i < set->workers.size(); ++i) {
    EXPECT_EQ(FirstLine(set->workers[i].stdout_fd), std::to_string(i));
  }
  ASSERT_TRUE(processes_->SignalGroup(set->pgid, SIGKILL).ok());
  for (const StandbyWorker& w : set->workers) {
    for (int fd : {w.control, w.stdout_fd, w.stderr_fd}) close(fd);
    int status;
    EXPECT_EQ(waitpid(w.pid, &status, 0), w.pid);
  }
}

TEST_F(StandbyPoolTest, SetOfAnotherUserOrFolderIsNeverHandedOver) {
  const bool root = geteuid() == 0;
  std::optional<ProcessCredentials> nobody;
  if (root) nobody = ProcessCredentials{65534, 65534, {65534}};
  StandbyPool pool(processes_.get());
  pool.Fill(kArgv, kEnv, 1, "/", nobody);
  ASSERT_FALSE(pool.empty());
  if (root) {
    // It runs as that user.
    struct stat st;
    ASSERT_EQ(stat(("/proc/" + std::to_string(pool.set().workers[0].pid)).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 65534u);
    EXPECT_FALSE(pool.Take(kArgv, kEnv, 1, "/", std::nullopt).has_value());
  }
  EXPECT_FALSE(pool.Take(kArgv, kEnv, 1, "/tmp", nobody).has_value());
  auto set = pool.Take(kArgv, kEnv, 1, "/", nobody);
  ASSERT_TRUE(set.has_value());
  ASSERT_TRUE(processes_->SignalGroup(set->pgid, SIGKILL).ok());
  for (const StandbyWorker& w : set->workers) {
    for (int fd : {w.control, w.stdout_fd, w.stderr_fd}) close(fd);
    int status;
    EXPECT_EQ(waitpid(w.pid, &status, 0), w.pid);
  }
}

TEST_F(StandbyPoolTest, DeathOfOneStandbyDiscardsTheSet) {
  StandbyPool pool(processes_.get());
  pool.Fill(kArgv, kEnv, 2);
  ASSERT_EQ(pool.set().workers.size(), 2u);
  const pid_t a = pool.set().workers[0].pid, b = pool.set().workers[1].pid;
  const int pidfd = PidFd(a, 0);
  ASSERT_GE(pidfd, 0);
  ASSERT_EQ(kill(a, SIGKILL), 0);
  pollfd p{pidfd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1);
  close(pidfd);
  pool.ReapDead();  // as on SIGCHLD
  EXPECT_TRUE(pool.empty());
  EXPECT_FALSE(Alive(a)) << "reaped";
  EXPECT_FALSE(Alive(b)) << "its peer is useless: killed and reaped";
  EXPECT_FALSE(pool.Take(kArgv, kEnv, 2).has_value());
}

TEST_F(StandbyPoolTest, DiscardEndsAndReapsTheSet) {
  StandbyPool pool(processes_.get());
  pool.Fill(kArgv, kEnv, 1);
  ASSERT_FALSE(pool.empty());
  const pid_t a = pool.set().workers[0].pid;
  pool.Discard();
  EXPECT_TRUE(pool.empty());
  EXPECT_FALSE(Alive(a));
}

TEST_F(StandbyPoolTest, SpawnFailureKeepsNone) {
  StandbyPool pool(processes_.get());
  pool.Fill({"/nonexistent/program"}, kEnv, 2);
  EXPECT_TRUE(pool.empty());
}

}  // namespace
}  // namespace elastrun::launcher
