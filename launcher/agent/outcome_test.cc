#include "launcher/agent/outcome.h"

#include <signal.h>

#include "gtest/gtest.h"
#include "launcher/agent/fake_processes.h"

namespace elastrun::launcher {
namespace {

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);

class OutcomeTest : public ::testing::Test {
 protected:
  // Starts `n` fake workers under a supervisor.
  void Start(int n) {
    std::vector<WorkerSpec> workers(n);
    for (int i = 0; i < n; ++i) {
      workers[i].rank = i;
      workers[i].process.argv = {"worker"};
      workers[i].process.capture_output = false;
    }
    ASSERT_TRUE(supervisor_.Start(std::move(workers), kT0).ok());
  }
  // Exits `pid` and feeds the exit to the supervisor, as the loop does.
  void Exit(pid_t pid, int status) {
    fake_.Exit(pid, status);
    for (const auto& [p, s] : fake_.ReapExited(pid)) supervisor_.OnExit(p, s, kT0);
  }

  FakeProcesses fake_;
  Supervisor supervisor_{&fake_, Supervisor::Options{absl::Seconds(5)}};
};

TEST_F(OutcomeTest, AllZeroIsSuccess) {
  Start(2);
  for (pid_t pid : fake_.spawned()) Exit(pid, ExitedWith(0));
  AttemptOutcome o = ClassifyOutcome(supervisor_, absl::OkStatus());
  EXPECT_EQ(o.kind, AttemptOutcome::Kind::kSucceeded);
  EXPECT_EQ(o.exits.size(), 2u);
}

TEST_F(OutcomeTest, StopIsNotAFailure) {
  Start(1);
  fake_.obeyed.insert(SIGTERM);
  supervisor_.Stop(SIGTERM, kT0);
  for (const auto& [p, s] : fake_.ReapExited(fake_.spawned()[0])) supervisor_.OnExit(p, s, kT0);
  AttemptOutcome o = ClassifyOutcome(supervisor_, absl::OkStatus());
  EXPECT_EQ(o.kind, AttemptOutcome::Kind::kStopped);
  EXPECT_EQ(o.stop_signal, SIGTERM);
  EXPECT_FALSE(o.first_failure.has_value());
}

TEST_F(OutcomeTest, FailureBeforeAStopStaysTheRootCause) {
  Start(2);
  Exit(fake_.spawned()[1], ExitedWith(4));
  supervisor_.Stop(SIGINT, kT0);  // the user gave up while the group wound down
  Exit(fake_.spawned()[0], KilledBy(SIGTERM));
  AttemptOutcome o = ClassifyOutcome(supervisor_, absl::OkStatus());
  EXPECT_EQ(o.kind, AttemptOutcome::Kind::kFailed);
  ASSERT_TRUE(o.first_failure.has_value());
  EXPECT_EQ(o.first_failure->exit_code, 4);
}

TEST_F(OutcomeTest, SpawnErrorIsAFailureWithoutAWorker) {
  std::vector<WorkerSpec> workers(1);
  workers[0].process.argv = {"missing"};
  auto started = supervisor_.Start(std::move(workers), kT0);
  ASSERT_FALSE(started.ok());
  AttemptOutcome o = ClassifyOutcome(supervisor_, started.status());
  EXPECT_EQ(o.kind, AttemptOutcome::Kind::kFailed);
  EXPECT_FALSE(o.first_failure.has_value());
  EXPECT_FALSE(o.spawn_error.ok());
}

}  // namespace
}  // namespace elastrun::launcher
