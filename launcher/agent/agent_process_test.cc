// The agent on real processes: several attempts at once in one agent, each
// reaping only its own processes; the launcher's own signals fanned out to
// every attempt; grandchildren reaped with their group. Waits are on events
// (the loop's Poll) with generous deadlines, never sleeps.
#include <signal.h>
#include <unistd.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/test_specs.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;

AttemptSpec Shell(const std::vector<std::string>& scripts) {
  return testing::ShellAttempt(scripts);
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0; }

class AgentProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto agent = Agent::Create(AgentOptions{});
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
  }
  void TearDown() override {
    // Nothing a test started outlives it.
    for (Agent::AttemptId id : ids_) agent_->Stop(id, SIGKILL);
    PollUntil([this] { return agent_->active() == 0; });
  }

  // Starts `spec`; each worker's first stdout line is taken as a pid (the
  // scripts below print $$ or $!).
  size_t Start(AttemptSpec spec) {
    const size_t slot = outcomes_.size();
    outcomes_.emplace_back();
    pids_.emplace_back();
    spec.on_output_line = [this, slot](const OutputLine& line) {
      int pid;
      if (!line.is_stderr && absl::SimpleAtoi(line.text, &pid)) pids_[slot][line.rank] = pid;
    };
    ids_.push_back(agent_->Start(std::move(spec), [this, slot](auto outcome) {
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      outcomes_[slot] = *std::move(outcome);
    }));
    return slot;
  }

  // Serves events until `done()`, for at most 20 s.
  template <typename F>
  bool PollUntil(F done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!done() && absl::Now() < deadline) {
      EXPECT_TRUE(agent_->Poll(absl::Milliseconds(100)).ok());
    }
    return done();
  }
  bool Ended(size_t slot) { return outcomes_[slot].has_value(); }
  bool PidsKnown(size_t slot, size_t n) { return pids_[slot].size() == n; }

  std::unique_ptr<Agent> agent_;
  std::vector<Agent::AttemptId> ids_;
  std::vector<std::optional<AttemptOutcome>> outcomes_;
  std::vector<std::map<int, pid_t>> pids_;  // per attempt: rank -> pid
};

TEST_F(AgentProcessTest, TwoAttemptsAtOnceEachSeeOnlyTheirOwnExits) {
  const size_t a = Start(Shell({"echo $$; exec sleep 60", "echo $$; exec sleep 60"}));
  const size_t b = Start(Shell({"echo $$; exec sleep 60"}));
  ASSERT_TRUE(PollUntil([&] { return PidsKnown(a, 2) && PidsKnown(b, 1); }));
  ASSERT_EQ(kill(pids_[a][1], SIGKILL), 0);
  ASSERT_TRUE(PollUntil([&] { return Ended(a); }));
  EXPECT_EQ(outcomes_[a]->kind, AttemptOutcome::Kind::kFailed);
  ASSERT_TRUE(outcomes_[a]->first_failure.has_value());
  EXPECT_EQ(outcomes_[a]->first_failure->rank, 1);
  EXPECT_EQ(outcomes_[a]->first_failure->signal, SIGKILL);
  EXPECT_FALSE(Alive(pids_[a][0])) << "the failed worker's peer was stopped and reaped";
  EXPECT_FALSE(Ended(b));
  EXPECT_TRUE(Alive(pids_[b][0])) << "the other attempt runs on";
  EXPECT_EQ(agent_->active(), 1u);

  const size_t c = Start(Shell({"exit 7"}));  // a third one, while b runs
  ASSERT_TRUE(PollUntil([&] { return Ended(c); }));
  ASSERT_TRUE(outcomes_[c]->first_failure.has_value());
  EXPECT_EQ(outcomes_[c]->first_failure->exit_code, 7);
  EXPECT_FALSE(Ended(b));

  agent_->Stop(ids_[b], SIGTERM);
  ASSERT_TRUE(PollUntil([&] { return Ended(b); }));
  EXPECT_EQ(outcomes_[b]->kind, AttemptOutcome::Kind::kStopped);
  EXPECT_EQ(outcomes_[b]->stop_signal, SIGTERM);
  EXPECT_FALSE(Alive(pids_[b][0]));
}

TEST_F(AgentProcessTest, GrandchildLeftInTheGroupIsStoppedAndReaped) {
  // The worker exits 0 at once, leaving a child of its own running.
  const size_t a = Start(Shell({"sleep 60 & echo $!; exit 0"}));
  ASSERT_TRUE(PollUntil([&] { return Ended(a); }));
  EXPECT_EQ(outcomes_[a]->kind, AttemptOutcome::Kind::kSucceeded);
  ASSERT_EQ(pids_[a].count(0), 1u);
  EXPECT_FALSE(Alive(pids_[a][0])) << "stopped, and reaped (a zombie would still be alive)";
  EXPECT_FALSE(outcomes_[a]->leftovers);
}

TEST_F(AgentProcessTest, OrphanThatLeftItsGroupIsReapedToo) {
  // The worker's child moves to a session of its own (so no attempt's group
  // holds it) and outlives the worker: it is re-parented to the launcher.
  // Its pid is printed only once it has left the group.
  const size_t a = Start(Shell(
      {"{ setsid sh -c 'echo $$; exec sleep 60' & } | { read p; echo $p; }; exit 0"}));
  ASSERT_TRUE(PollUntil([&] { return Ended(a); }));
  ASSERT_EQ(pids_[a].count(0), 1u);
  const pid_t orphan = pids_[a][0];
  ASSERT_TRUE(Alive(orphan));
  ASSERT_EQ(kill(orphan, SIGKILL), 0);
  // A zombie still answers kill(pid, 0): gone means reaped.
  EXPECT_TRUE(PollUntil([&] { return !Alive(orphan); }));
}

TEST_F(AgentProcessTest, SignalToTheLauncherStopsEveryAttempt) {
  const size_t a = Start(Shell({"echo $$; exec sleep 60"}));
  const size_t b = Start(Shell({"echo $$; exec sleep 60"}));
  ASSERT_TRUE(PollUntil([&] { return PidsKnown(a, 1) && PidsKnown(b, 1); }));
  // Blocked in this thread since Agent::Create: it goes to the signalfd.
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  ASSERT_TRUE(PollUntil([&] { return Ended(a) && Ended(b); }));
  EXPECT_EQ(agent_->received_signal(), SIGTERM);
  for (size_t s : {a, b}) {
    EXPECT_EQ(outcomes_[s]->kind, AttemptOutcome::Kind::kStopped);
    EXPECT_EQ(outcomes_[s]->stop_signal, SIGTERM);
  }
}

TEST_F(AgentProcessTest, RunAttemptWritesLogsAndReportsTheExitCode) {
  char dir[] = "/tmp/agent-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  AttemptSpec spec = Shell({"echo out; echo err >&2; exit 3"});
  spec.outputs[0].stdout_log = absl::StrCat(dir, "/stdout.log");
  spec.outputs[0].stderr_log = absl::StrCat(dir, "/stderr.log");
  auto outcome = agent_->RunAttempt(std::move(spec));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->kind, AttemptOutcome::Kind::kFailed);
  ASSERT_TRUE(outcome->first_failure.has_value());
  EXPECT_EQ(outcome->first_failure->ShellCode(), 3);
  for (const auto& [name, text] : {std::pair{"stdout", "out\n"}, std::pair{"stderr", "err\n"}}) {
    const std::string path = absl::StrCat(dir, "/", name, ".log");
    FILE* f = fopen(path.c_str(), "r");
    ASSERT_NE(f, nullptr) << path;
    char buf[64] = {0};
    ASSERT_NE(fgets(buf, sizeof buf, f), nullptr);
    fclose(f);
    EXPECT_EQ(std::string(buf), text);
    unlink(path.c_str());
  }
  rmdir(dir);
}

}  // namespace
}  // namespace elastrun::launcher
