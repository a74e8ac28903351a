// The agent's attempt loop on fake processes and a fake clock: exits, stops,
// grace and SIGKILL, the store gate, per-attempt stops. No real process is
// started and nothing sleeps: the test polls with a zero timeout after each
// event it causes, and advances the clock.
#include "launcher/agent/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/standby.h"
#include "common/worker_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/agent/fake_processes.h"
#include "launcher/agent/output.h"
#include "launcher/agent/test_specs.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Workers with ranks 0..n-1 and no log files (fake processes: argv unused).
AttemptSpec Spec(int n) {
  return testing::AttemptOf(std::vector<std::vector<std::string>>(n, {"worker"}));
}

// Reads what is waiting on a non-blocking-read copy of a descriptor.
std::string ReadNow(int fd) {
  std::string out;
  char buf[4096];
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  fcntl(fd, F_SETFL, flags);
  return out;
}

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeAgent(AgentOptions{}); }

  void MakeAgent(AgentOptions options) {
    agent_.reset();
    auto fake = std::make_unique<FakeProcesses>();
    fake_ = fake.get();
    options.clock = &clock_;
    options.grace = absl::Seconds(30);
    options.is_listening = [this](int port) {
      ++looks_;
      return listening_;
    };
    auto agent = Agent::Create(std::move(options), std::move(fake));
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
  }

  // Starts `spec`; its outcome lands in outcomes_[returned index].
  size_t Start(AttemptSpec spec) {
    const size_t slot = outcomes_.size();
    outcomes_.emplace_back();
    ids_.push_back(agent_->Start(std::move(spec), [this, slot](auto outcome) {
      outcomes_[slot] = std::move(outcome);
    }));
    return slot;
  }
  // Serves whatever is ready now (twice: an event may cause another).
  void Poll() {
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(agent_->Poll(absl::ZeroDuration()).ok());
  }
  std::vector<int> SignalsTo(pid_t pgid) const {
    std::vector<int> sigs;
    for (const auto& [g, sig] : fake_->signals()) {
      if (g == pgid) sigs.push_back(sig);
    }
    return sigs;
  }

  FakeClock clock_;
  FakeProcesses* fake_ = nullptr;
  bool listening_ = false;
  int looks_ = 0;
  std::unique_ptr<Agent> agent_;
  std::vector<Agent::AttemptId> ids_;
  std::vector<std::optional<absl::StatusOr<AttemptOutcome>>> outcomes_;
};

TEST_F(AgentTest, EveryWorkerExitingZeroSucceedsAndOutputReachesTheCallback) {
  AttemptSpec spec = Spec(2);
  std::vector<std::string> lines;
  spec.on_output_line = [&lines](const OutputLine& l) {
    lines.push_back(absl::StrCat(l.rank, l.is_stderr ? "e:" : "o:", l.text));
  };
  Start(std::move(spec));
  Poll();
  ASSERT_EQ(fake_->spawned().size(), 2u);
  const pid_t a = fake_->spawned()[0], b = fake_->spawned()[1];
  EXPECT_EQ(fake_->proc(b).pgid, a) << "one process group per attempt";
  ASSERT_TRUE(WriteAll(fake_->proc(b).stderr_w, "warn\nhal"));
  Poll();
  EXPECT_THAT(lines, ElementsAre("1e:warn"));
  fake_->Exit(a, ExitedWith(0));
  Poll();
  EXPECT_FALSE(outcomes_[0].has_value()) << "rank 1 still runs";
  fake_->Exit(b, ExitedWith(0));
  Poll();
  ASSERT_TRUE(outcomes_[0].has_value());
  ASSERT_TRUE(outcomes_[0]->ok());
  EXPECT_EQ((*outcomes_[0])->kind, AttemptOutcome::Kind::kSucceeded);
  EXPECT_EQ((*outcomes_[0])->exits.size(), 2u);
  EXPECT_THAT(lines, ElementsAre("1e:warn", "1e:hal"));
  EXPECT_THAT(fake_->signals(), IsEmpty());
  EXPECT_EQ(agent_->active(), 0u);
}

TEST_F(AgentTest, FailureStopsTheGroupThenKillsItWhenTheGraceEnds) {
  Start(Spec(2));
  Poll();
  const pid_t a = fake_->spawned()[0], b = fake_->spawned()[1];
  fake_->Exit(b, ExitedWith(3));
  Poll();
  EXPECT_THAT(SignalsTo(a), ElementsAre(SIGTERM)) << "the peers of a failed worker";
  // Rank 0 ignores SIGTERM (the fake obeys only SIGKILL).
  clock_.Advance(absl::Seconds(29));
  Poll();
  EXPECT_THAT(SignalsTo(a), ElementsAre(SIGTERM));
  EXPECT_FALSE(outcomes_[0].has_value());
  clock_.Advance(absl::Seconds(1));
  Poll();
  EXPECT_THAT(SignalsTo(a), ElementsAre(SIGTERM, SIGKILL));
  ASSERT_TRUE(outcomes_[0].has_value());
  const AttemptOutcome& o = **outcomes_[0];
  EXPECT_EQ(o.kind, AttemptOutcome::Kind::kFailed);
  ASSERT_TRUE(o.first_failure.has_value());
  EXPECT_EQ(o.first_failure->rank, 1);
  EXPECT_EQ(o.first_failure->exit_code, 3);
  EXPECT_EQ(o.exits.back().signal, SIGKILL);
}

TEST_F(AgentTest, ExitsSeenTogetherTakeADeathBySignalAsTheRootCause) {
  Start(Spec(2));
  Poll();
  const pid_t a = fake_->spawned()[0], b = fake_->spawned()[1];
  fake_->Exit(a, ExitedWith(1));  // a peer failing on the closed connection
  fake_->Exit(b, KilledBy(SIGSEGV));
  Poll();
  ASSERT_TRUE(outcomes_[0].has_value());
  ASSERT_TRUE((*outcomes_[0])->first_failure.has_value());
  EXPECT_EQ((*outcomes_[0])->first_failure->signal, SIGSEGV);
}

TEST_F(AgentTest, WorkerThatCannotStartFailsTheAttempt) {
  AttemptSpec spec = Spec(2);
  spec.workers[1].process.argv = {"missing"};
  Start(std::move(spec));
  Poll();
  ASSERT_TRUE(outcomes_[0].has_value());
  EXPECT_EQ((*outcomes_[0])->kind, AttemptOutcome::Kind::kFailed);
  EXPECT_THAT((*outcomes_[0])->spawn_error.message(), ::testing::HasSubstr("missing"));
  EXPECT_THAT(SignalsTo(fake_->spawned()[0]), ElementsAre(SIGKILL))
      << "the worker already started is not left behind";
}

TEST_F(AgentTest, LogFileThatCannotBeWrittenIsAnErrorBeforeAnyWorkerStarts) {
  AttemptSpec spec = Spec(1);
  spec.outputs[0].stdout_log = "/nonexistent-dir/stdout.log";
  Start(std::move(spec));
  Poll();
  ASSERT_TRUE(outcomes_[0].has_value());
  EXPECT_FALSE(outcomes_[0]->ok());
  EXPECT_THAT(outcomes_[0]->status().message(), ::testing::HasSubstr("/nonexistent-dir"));
  EXPECT_THAT(fake_->spawned(), IsEmpty());
}

TEST_F(AgentTest, StopReachesItsAttemptOnly) {
  Start(Spec(1));
  Start(Spec(1));
  Poll();
  const pid_t a = fake_->spawned()[0], b = fake_->spawned()[1];
  fake_->obeyed.insert(SIGTERM);
  agent_->Stop(ids_[0], SIGTERM);
  Poll();
  EXPECT_THAT(SignalsTo(a), ElementsAre(SIGTERM));
  EXPECT_THAT(SignalsTo(b), IsEmpty());
  ASSERT_TRUE(outcomes_[0].has_value());
  EXPECT_EQ((*outcomes_[0])->kind, AttemptOutcome::Kind::kStopped);
  EXPECT_EQ((*outcomes_[0])->stop_signal, SIGTERM);
  EXPECT_FALSE(outcomes_[1].has_value());
  EXPECT_EQ(agent_->active(), 1u);
}

TEST_F(AgentTest, StaleStopOfAnEndedAttemptDoesNotStopTheNextOne) {
  Start(Spec(1));
  Poll();
  fake_->Exit(fake_->spawned()[0], ExitedWith(0));
  Poll();
  ASSERT_TRUE(outcomes_[0].has_value());
  agent_->Stop(ids_[0], SIGTERM);  // raced with the end of attempt 0
  Start(Spec(1));
  Poll();
  const pid_t next = fake_->spawned()[1];
  EXPECT_THAT(SignalsTo(next), IsEmpty());
  EXPECT_FALSE(outcomes_[1].has_value());
  EXPECT_EQ((*outcomes_[0])->kind, AttemptOutcome::Kind::kSucceeded);
}

TEST_F(AgentTest, StopBeforeTheProcessesStartedAppliesToThem) {
  Start(Spec(1));
  agent_->Stop(ids_[0], SIGINT);  // before the loop began the attempt
  Poll();
  ASSERT_EQ(fake_->spawned().size(), 1u);
  EXPECT_THAT(SignalsTo(fake_->spawned()[0]), ElementsAre(SIGINT));
  fake_->Exit(fake_->spawned()[0], KilledBy(SIGINT));
  Poll();
  ASSERT_TRUE(outcomes_[0].has_value());
  EXPECT_EQ((*outcomes_[0])->kind, AttemptOutcome::Kind::kStopped);
  EXPECT_EQ((*outcomes_[0])->stop_signal, SIGINT);
}

TEST_F(AgentTest, LeftoverInTheGroupIsStoppedAndReapedBeforeTheEnd) {
  Start(Spec(1));
  Poll();
  const pid_t a = fake_->spawned()[0];
  const pid_t stray = fake_->AddStray(a);
  fake_->Exit(a, ExitedWith(0));
  Poll();
  EXPECT_THAT(SignalsTo(a), ElementsAre(SIGTERM));
  EXPECT_FALSE(outcomes_[0].has_value()) << "the group is not empty yet";
  fake_->Exit(stray, KilledBy(SIGTERM));  // reaped through the group (SIGCHLD)
  Poll();
  ASSERT_TRUE(outcomes_[0].has_value());
  EXPECT_EQ((*outcomes_[0])->kind, AttemptOutcome::Kind::kSucceeded);
  EXPECT_TRUE(fake_->proc(stray).reaped);
}

TEST_F(AgentTest, StandbysStartOnceTheWorkersAreUpAndTakeOverTheNextAttempt) {
  AgentOptions options;
  options.standby = true;
  MakeAgent(std::move(options));
  auto spec = [](int rank_offset) {
    AttemptSpec s = Spec(2);
    s.standby_argv = {"worker"};
    s.next_attempt_possible = true;
    for (WorkerSpec& w : s.workers) w.process.env = {absl::StrCat("RANK=", rank_offset + w.rank)};
    return s;
  };
  Start(spec(0));
  Poll();
  ASSERT_EQ(fake_->spawned().size(), 2u);
  const pid_t w0 = fake_->spawned()[0], w1 = fake_->spawned()[1];
  for (pid_t w : {w0, w1}) {
    EXPECT_EQ(ReadNow(fake_->proc(w).passed.at(0)), EncodeActivation({}))
        << "started directly: an empty activation";
  }
  ASSERT_TRUE(WriteAll(fake_->proc(w0).passed[0], std::string(1, kStandbyReady)));
  Poll();
  EXPECT_EQ(fake_->spawned().size(), 2u) << "not while a worker is still starting";
  ASSERT_TRUE(WriteAll(fake_->proc(w1).passed[0], std::string(1, kStandbyReady)));
  Poll();
  ASSERT_EQ(fake_->spawned().size(), 4u);
  const pid_t s0 = fake_->spawned()[2], s1 = fake_->spawned()[3];
  EXPECT_EQ(fake_->proc(s0).pgid, s0) << "the standbys' own group";
  EXPECT_EQ(fake_->proc(s1).pgid, s0);
  EXPECT_EQ(ReadNow(fake_->proc(s0).passed.at(0)), "") << "waiting for an activation";

  fake_->obeyed.insert(SIGTERM);
  fake_->Exit(w1, ExitedWith(1));
  Poll();
  ASSERT_TRUE(outcomes_[0].has_value());
  EXPECT_EQ((*outcomes_[0])->kind, AttemptOutcome::Kind::kFailed);
  EXPECT_FALSE(fake_->proc(s0).exited) << "the standbys are not in the failed group";

  AttemptSpec last = spec(10);
  last.next_attempt_possible = false;  // else the next standbys start at once
  Start(std::move(last));
  Poll();
  EXPECT_EQ(fake_->spawned().size(), 4u) << "no new process: the standbys take over";
  // The activation brings the worker's fresh agent-socket secret: a
  // standby had none while it waited.
  const std::string a0 = ReadNow(fake_->proc(s0).passed[0]);
  const std::string a1 = ReadNow(fake_->proc(s1).passed[0]);
  EXPECT_EQ(a0.substr(0, 8), std::string("RANK=10\0", 8));
  EXPECT_EQ(a1.substr(0, 8), std::string("RANK=11\0", 8));
  const std::string secret = absl::StrCat(env::kAgentSecret, "=");
  EXPECT_NE(a0.find(secret), std::string::npos);
  EXPECT_NE(a1.find(secret), std::string::npos);
  EXPECT_NE(a0.substr(a0.find(secret)), a1.substr(a1.find(secret)));
  for (const std::string& e : fake_->proc(s0).spec.env)
    EXPECT_NE(e.find(secret), 0u) << e;
  fake_->Exit(s0, ExitedWith(0));
  fake_->Exit(s1, ExitedWith(0));
  Poll();
  ASSERT_TRUE(outcomes_[1].has_value());
  EXPECT_EQ((*outcomes_[1])->kind, AttemptOutcome::Kind::kSucceeded);
  EXPECT_TRUE((*outcomes_[1])->from_standby);
}

// The store gate: workers with standby sockets (--standby) get their
// activation; ranks != 0 only once rank 0's store listens.
class StoreGateAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentOptions options;
    options.standby = true;
    MakeAgent(std::move(options));
    AttemptSpec spec = Spec(2);
    spec.store_port = 29500;
    Start(std::move(spec));
    Poll();
    ASSERT_EQ(fake_->spawned().size(), 2u);
    rank0_ = fake_->proc(fake_->spawned()[0]).passed.at(0);
    rank1_ = fake_->proc(fake_->spawned()[1]).passed.at(0);
    EXPECT_EQ(ReadNow(rank0_), EncodeActivation({})) << "rank 0 goes first";
    EXPECT_EQ(ReadNow(rank1_), "");
  }
  int rank0_ = -1, rank1_ = -1;
};

TEST_F(StoreGateAgentTest, OthersAreActivatedOnceTheStoreListens) {
  Poll();
  EXPECT_EQ(looks_, 0) << "no look before rank 0 finished its start-up";
  ASSERT_TRUE(WriteAll(rank0_, std::string(1, kStandbyReady)));
  Poll();
  EXPECT_GT(looks_, 0);
  EXPECT_EQ(ReadNow(rank1_), "");
  clock_.Advance(kStoreGatePoll);
  listening_ = true;
  Poll();
  EXPECT_EQ(ReadNow(rank1_), EncodeActivation({}));
}

TEST_F(StoreGateAgentTest, OthersAreActivatedAnywayAfterTheLongestHold) {
  ASSERT_TRUE(WriteAll(rank0_, std::string(1, kStandbyReady)));
  Poll();
  clock_.Advance(kStoreGateMax - absl::Milliseconds(1));
  Poll();
  EXPECT_EQ(ReadNow(rank1_), "");
  clock_.Advance(absl::Milliseconds(1));
  Poll();
  EXPECT_EQ(ReadNow(rank1_), EncodeActivation({}));
}

}  // namespace
}  // namespace elastrun::launcher
