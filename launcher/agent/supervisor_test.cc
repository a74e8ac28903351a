#include "launcher/agent/supervisor.h"

#include <signal.h>
#include <sys/wait.h>

#include <map>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

// Records spawns and signals; processes "exit" when the test says so.
class FakeProcesses : public ProcessControl {
 public:
  absl::StatusOr<SpawnedProcess> Spawn(const ProcessSpec& spec) override {
    if (fail_spawn_at == static_cast<int>(spawned.size())) {
      return absl::FailedPreconditionError("cannot run 'nope'");
    }
    SpawnedProcess p;
    p.pid = next_pid++;
    spawned.push_back({p.pid, spec.process_group});
    group_members.insert(p.pid);
    return p;
  }
  absl::Status SignalGroup(pid_t pgid, int sig) override {
    signals.emplace_back(pgid, sig);
    return absl::OkStatus();
  }
  bool GroupExists(pid_t) override { return !group_members.empty() || extra_members > 0; }
  // The supervisor never waits for exits itself: its owner feeds them.
  absl::StatusOr<int> OpenExitFd(pid_t) override {
    return absl::UnimplementedError("not used by the supervisor");
  }
  std::vector<std::pair<pid_t, int>> ReapExited(pid_t) override { return {}; }
  pid_t PeekExited() override { return 0; }

  int fail_spawn_at = -1;
  pid_t next_pid = 100;
  std::vector<std::pair<pid_t, pid_t>> spawned;  // pid, requested group
  std::set<pid_t> group_members;
  int extra_members = 0;  // grandchildren that outlive the workers
  std::vector<std::pair<pid_t, int>> signals;
};

int Exited(int code) { return code << 8; }       // as waitpid reports
int Killed(int sig) { return sig; }

std::vector<WorkerSpec> Workers(int n) {
  std::vector<WorkerSpec> w(n);
  for (int i = 0; i < n; ++i) {
    w[i].local_rank = i;
    w[i].rank = 10 + i;
    w[i].process.argv = {"worker"};
  }
  return w;
}

class SupervisorTest : public ::testing::Test {
 protected:
  void Exit(pid_t pid, int status) {
    fake.group_members.erase(pid);
    sup.OnExit(pid, status, now);
  }
  FakeProcesses fake;
  absl::Time now = absl::UnixEpoch() + absl::Hours(1);
  Supervisor sup{&fake, Supervisor::Options{absl::Seconds(5)}};
};

TEST_F(SupervisorTest, StartsAllWorkersInOneNewGroup) {
  ASSERT_TRUE(sup.Start(Workers(3), now).ok());
  ASSERT_EQ(fake.spawned.size(), 3u);
  EXPECT_EQ(fake.spawned[0].second, 0);    // leads a new group
  EXPECT_EQ(fake.spawned[1].second, 100);  // joins the leader's group
  EXPECT_EQ(fake.spawned[2].second, 100);
  EXPECT_EQ(sup.process_group(), 100);
  EXPECT_EQ(sup.state(), Supervisor::State::kRunning);
}

TEST_F(SupervisorTest, AllExitZeroIsSuccess) {
  ASSERT_TRUE(sup.Start(Workers(2), now).ok());
  Exit(101, Exited(0));
  EXPECT_EQ(sup.state(), Supervisor::State::kRunning);
  Exit(100, Exited(0));
  EXPECT_EQ(sup.state(), Supervisor::State::kDone);
  EXPECT_TRUE(sup.succeeded());
  EXPECT_FALSE(sup.first_failure());
  EXPECT_TRUE(fake.signals.empty());
}

TEST_F(SupervisorTest, HungWorkerStaysTheRootCauseHoweverItEnds) {
  ASSERT_TRUE(sup.Start(Workers(2), now).ok());
  sup.DeclareHung(1, /*step=*/7, absl::Seconds(30), now);
  ASSERT_TRUE(sup.first_failure());
  EXPECT_TRUE(sup.first_failure()->hung);
  EXPECT_EQ(sup.first_failure()->rank, 11);
  EXPECT_EQ(sup.first_failure()->hung_step, 7);
  EXPECT_TRUE(fake.signals.empty()) << "the caller stops the group after the dump";
  // Resumed for its dump, it finishes; another worker then fails: neither
  // replaces the hang as the cause, and the attempt does not succeed.
  Exit(101, Exited(0));
  Exit(100, Exited(4));
  EXPECT_EQ(sup.state(), Supervisor::State::kDone);
  EXPECT_FALSE(sup.succeeded());
  EXPECT_EQ(sup.first_failure()->rank, 11);
  EXPECT_TRUE(sup.first_failure()->hung);
  EXPECT_NE(sup.first_failure()->ShellCode(), 0);
}

TEST_F(SupervisorTest, FirstFailureStopsGroupThenKillsAfterGrace) {
  ASSERT_TRUE(sup.Start(Workers(3), now).ok());
  now += absl::Seconds(1);
  Exit(101, Exited(3));
  ASSERT_TRUE(sup.first_failure());
  EXPECT_EQ(sup.first_failure()->rank, 11);
  EXPECT_EQ(sup.first_failure()->exit_code, 3);
  EXPECT_EQ(sup.state(), Supervisor::State::kStopping);
  EXPECT_THAT(fake.signals, ElementsAre(Pair(100, SIGTERM)));
  EXPECT_EQ(*sup.NextDeadline(), now + absl::Seconds(5));

  // One worker obeys SIGTERM; the other ignores it until the grace ends.
  Exit(100, Killed(SIGTERM));
  now += absl::Seconds(4);
  sup.OnTick(now);
  EXPECT_EQ(fake.signals.size(), 1u);
  now += absl::Seconds(1);
  sup.OnTick(now);
  EXPECT_THAT(fake.signals, ElementsAre(Pair(100, SIGTERM), Pair(100, SIGKILL)));
  Exit(102, Killed(SIGKILL));
  EXPECT_EQ(sup.state(), Supervisor::State::kDone);
  EXPECT_FALSE(sup.succeeded());
  // The consequences of the stop are not the root cause.
  EXPECT_EQ(sup.first_failure()->rank, 11);
  EXPECT_EQ(sup.exits().size(), 3u);
}

TEST_F(SupervisorTest, SignalDeathIsAFailureWithSignal) {
  ASSERT_TRUE(sup.Start(Workers(2), now).ok());
  Exit(100, Killed(SIGKILL));
  ASSERT_TRUE(sup.first_failure());
  EXPECT_EQ(sup.first_failure()->signal, SIGKILL);
  EXPECT_EQ(sup.first_failure()->ShellCode(), 137);
  EXPECT_EQ(DescribeExit(*sup.first_failure()), "signal 9 (SIGKILL)");
}

TEST_F(SupervisorTest, StopForwardsSignalAndSecondKillEscalates) {
  ASSERT_TRUE(sup.Start(Workers(2), now).ok());
  sup.Stop(SIGINT, now);
  EXPECT_THAT(fake.signals, ElementsAre(Pair(100, SIGINT)));
  sup.Stop(SIGKILL, now);
  EXPECT_THAT(fake.signals, ElementsAre(Pair(100, SIGINT), Pair(100, SIGKILL)));
  Exit(100, Killed(SIGINT));
  Exit(101, Killed(SIGKILL));
  EXPECT_EQ(sup.state(), Supervisor::State::kDone);
  EXPECT_EQ(sup.stop_signal(), SIGINT);
  EXPECT_FALSE(sup.first_failure());  // stopped, not failed
  EXPECT_FALSE(sup.succeeded());
}

TEST_F(SupervisorTest, LeftoverGrandchildrenAreStoppedBeforeDone) {
  ASSERT_TRUE(sup.Start(Workers(1), now).ok());
  fake.extra_members = 1;
  Exit(100, Exited(0));
  EXPECT_EQ(sup.state(), Supervisor::State::kStopping);
  EXPECT_THAT(fake.signals, ElementsAre(Pair(100, SIGTERM)));
  fake.extra_members = 0;
  sup.OnExit(555, Exited(0), now);  // the orphan, reaped by the subreaper
  EXPECT_EQ(sup.state(), Supervisor::State::kDone);
  EXPECT_TRUE(sup.succeeded());  // cleaning up leftovers is not a failure
}

TEST_F(SupervisorTest, SpawnFailureStopsStartedWorkers) {
  fake.fail_spawn_at = 1;
  auto r = sup.Start(Workers(3), now);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("local rank 1"));
  EXPECT_THAT(fake.signals, ElementsAre(Pair(100, SIGKILL)));
  Exit(100, Killed(SIGKILL));
  EXPECT_EQ(sup.state(), Supervisor::State::kDone);
}

TEST_F(SupervisorTest, GivesUpOnUnreapableGroupAfterKill) {
  ASSERT_TRUE(sup.Start(Workers(1), now).ok());
  fake.extra_members = 1;  // never goes away
  sup.Stop(SIGKILL, now);
  Exit(100, Killed(SIGKILL));
  EXPECT_EQ(sup.state(), Supervisor::State::kStopping);
  now = *sup.NextDeadline();
  sup.OnTick(now);
  EXPECT_EQ(sup.state(), Supervisor::State::kDone);
  EXPECT_TRUE(sup.leftovers());
}

// A worker SIGKILL does not end (uninterruptible sleep: D state, on a hung
// file system or device) cannot hold its attempt, and the node's slots,
// for ever: given up once the reap limit after SIGKILL passed, and named.
TEST_F(SupervisorTest, GivesUpOnAWorkerThatOutlivesSigkillAndNamesIt) {
  ASSERT_TRUE(sup.Start(Workers(2), now).ok());
  Exit(100, Exited(1));
  EXPECT_THAT(fake.signals, ElementsAre(Pair(100, SIGTERM)));
  now += absl::Seconds(5);  // the grace
  sup.OnTick(now);
  EXPECT_THAT(fake.signals, ElementsAre(Pair(100, SIGTERM), Pair(100, SIGKILL)));
  // 101 never exits.
  ASSERT_TRUE(sup.NextDeadline().has_value());
  EXPECT_EQ(sup.state(), Supervisor::State::kStopping);
  now = *sup.NextDeadline();
  sup.OnTick(now);
  EXPECT_EQ(sup.state(), Supervisor::State::kDone);
  ASSERT_EQ(sup.unreaped().size(), 1u);
  EXPECT_EQ(sup.unreaped()[0].pid, 101);
  EXPECT_EQ(sup.unreaped()[0].rank, 11);
  EXPECT_TRUE(sup.leftovers());
  EXPECT_EQ(
      DescribeUnreaped(sup.unreaped()),
      "rank 11 (pid 101) did not end within 10s of SIGKILL (uninterruptible sleep, D "
      "state: a hung file system or device?); the attempt ended without it: its slots "
      "are free again, but the process may still hold memory or devices");
  EXPECT_EQ(sup.first_failure()->rank, 10);  // the root cause stays
  // Should it end after all, nothing changes.
  sup.OnExit(101, Killed(SIGKILL), now);
  EXPECT_EQ(sup.state(), Supervisor::State::kDone);
  EXPECT_EQ(sup.exits().size(), 1u);
}

}  // namespace
}  // namespace elastrun::launcher
