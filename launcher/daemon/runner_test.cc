// AgentRunner on real processes: several attempts active at once, each
// stopped on its own, each `done` called once.
#include "launcher/daemon/runner.h"

#include <signal.h>

#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "launcher/agent/test_specs.h"

namespace elastrun::launcher {
namespace {

AttemptSpec Shell(const std::string& script) { return testing::ShellAttempt({script}); }

// One attempt's end, as its `done` saw it.
struct Ended {
  absl::Notification done;
  AttemptOutcome outcome;
  int calls = 0;
  std::function<void(const AttemptOutcome&)> Callback() {
    return [this](const AttemptOutcome& o) {
      ++calls;
      outcome = o;
      done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(20)); }
};

class RunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto agent = Agent::Create(AgentOptions{});
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
    runner_ = std::make_unique<AgentRunner>(agent_.get());
  }
  void TearDown() override {
    runner_.reset();  // waits for the attempts' ends
    agent_.reset();
  }
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<AgentRunner> runner_;
};

TEST_F(RunnerTest, AttemptsRunAtOnceAndStopOneByOne) {
  Ended a, b, c;
  runner_->Start(1, Shell("exec sleep 60"), a.Callback());
  runner_->Start(2, Shell("exec sleep 60"), b.Callback());
  runner_->Start(3, Shell("exit 3"), c.Callback());
  ASSERT_TRUE(c.Wait());
  ASSERT_TRUE(c.outcome.first_failure.has_value());
  EXPECT_EQ(c.outcome.first_failure->exit_code, 3);
  EXPECT_FALSE(a.done.HasBeenNotified());
  EXPECT_FALSE(b.done.HasBeenNotified());

  runner_->Stop(2, SIGTERM);
  ASSERT_TRUE(b.Wait());
  EXPECT_EQ(b.outcome.kind, AttemptOutcome::Kind::kStopped);
  EXPECT_EQ(b.outcome.stop_signal, SIGTERM);
  EXPECT_FALSE(a.done.HasBeenNotified());
  runner_->Stop(2, SIGKILL);  // ended: a no-op

  runner_->Stop(1, SIGINT);
  ASSERT_TRUE(a.Wait());
  EXPECT_EQ(a.outcome.stop_signal, SIGINT);
  runner_.reset();
  EXPECT_EQ(a.calls + b.calls + c.calls, 3) << "each done exactly once";
}

TEST_F(RunnerTest, StopRightAfterStartAppliesToTheAttempt) {
  Ended a;
  runner_->Start(7, Shell("exec sleep 60"), a.Callback());
  runner_->Stop(7, SIGTERM);
  ASSERT_TRUE(a.Wait());
  EXPECT_EQ(a.outcome.kind, AttemptOutcome::Kind::kStopped);
}

TEST_F(RunnerTest, AttemptThatCannotBeginIsAFailureToStart) {
  Ended a;
  AttemptSpec spec = Shell("exit 0");
  spec.outputs[0].stdout_log = "/nonexistent-dir/stdout.log";
  runner_->Start(1, std::move(spec), a.Callback());
  ASSERT_TRUE(a.Wait());
  EXPECT_EQ(a.outcome.kind, AttemptOutcome::Kind::kFailed);
  EXPECT_FALSE(a.outcome.spawn_error.ok());
}

}  // namespace
}  // namespace elastrun::launcher
