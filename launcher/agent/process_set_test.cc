#include "launcher/agent/process_set.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

// glibc 2.36's pidfd_open lacks extern "C" in C++.
int PidFd(pid_t pid, unsigned flags) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, flags));
}

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

// Waits (at most 10 s) until `fd` is readable.
bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 10000) == 1;
}

std::string ReadLine(int fd) {
  std::string out;
  char c;
  while (Readable(fd) && read(fd, &c, 1) == 1 && c != '\n') out.push_back(c);
  return out;
}

class ProcessSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    auto poller = Poller::Create();
    ASSERT_TRUE(poller.ok());
    poller_ = *std::move(poller);
  }
  SpawnedProcess Spawn(const std::string& script) {
    ProcessSpec spec;
    spec.argv = {"/bin/sh", "-c", script};
    spec.env = {"PATH=/usr/bin:/bin"};
    auto p = processes_->Spawn(spec);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : SpawnedProcess{};
  }

  std::unique_ptr<ProcessControl> processes_ = NewPosixProcessControl();
  std::unique_ptr<Poller> poller_;
};

TEST_F(ProcessSetTest, SeesItsWorkersExitAtOnceAndReapsOnlyThem) {
  ProcessSet set(processes_.get(), poller_.get());
  const SpawnedProcess mine = Spawn("exit 5");
  const SpawnedProcess other = Spawn("exit 6");  // another attempt's
  ASSERT_TRUE(set.Add(mine.pid, mine.pid).ok());
  EXPECT_EQ(set.live(), 1u);
  // Its pidfd wakes the loop: no SIGCHLD, no polling.
  while (set.live() > 0) ASSERT_TRUE(poller_->Wait(absl::Seconds(10)).ok());
  EXPECT_THAT(set.TakeExits(), ElementsAre(Pair(mine.pid, 5 << 8)));
  set.ReapGroups();
  EXPECT_THAT(set.TakeExits(), IsEmpty()) << "another group's child is not ours";
  int status = 0;
  ASSERT_EQ(waitpid(other.pid, &status, 0), other.pid) << "left for its owner to reap";
  EXPECT_EQ(WEXITSTATUS(status), 6);
}

TEST_F(ProcessSetTest, ReapsWhatAWorkerLeftInItsGroup) {
  ProcessSet set(processes_.get(), poller_.get());
  const SpawnedProcess worker = Spawn("sleep 60 & echo $!; exit 0");
  ASSERT_TRUE(set.Add(worker.pid, worker.pid).ok());
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(ReadLine(worker.stdout_fd), &grandchild));
  while (set.live() > 0) ASSERT_TRUE(poller_->Wait(absl::Seconds(10)).ok());
  EXPECT_THAT(set.TakeExits(), ElementsAre(Pair(worker.pid, 0)));
  // Re-parented to us (a subreaper); killed, it must be reaped with the group.
  const int pidfd = PidFd(grandchild, 0);
  ASSERT_GE(pidfd, 0);
  ASSERT_TRUE(processes_->SignalGroup(worker.pid, SIGKILL).ok());
  ASSERT_TRUE(Readable(pidfd));
  close(pidfd);
  set.ReapGroups();
  EXPECT_THAT(set.TakeExits(), ElementsAre(Pair(grandchild, SIGKILL)));
  EXPECT_FALSE(processes_->GroupExists(worker.pid));
  for (int fd : {worker.stdout_fd, worker.stderr_fd}) close(fd);
}

TEST_F(ProcessSetTest, OrdersExitsSeenTogetherBySeverity) {
  ProcessSet set(processes_.get(), poller_.get());
  const SpawnedProcess clean = Spawn("exit 0");
  const SpawnedProcess code = Spawn("exit 2");
  const SpawnedProcess killed = Spawn("kill -9 $$");
  for (const SpawnedProcess& p : {clean, code, killed}) {
    ASSERT_TRUE(set.Add(p.pid, p.pid).ok());
    const int pidfd = PidFd(p.pid, 0);
    ASSERT_TRUE(Readable(pidfd));  // all three have exited
    close(pidfd);
  }
  while (set.live() > 0) ASSERT_TRUE(poller_->Wait(absl::Seconds(10)).ok());
  EXPECT_THAT(set.TakeExits(), ElementsAre(Pair(killed.pid, SIGKILL), Pair(code.pid, 2 << 8),
                                           Pair(clean.pid, 0)));
}

}  // namespace
}  // namespace elastrun::launcher
