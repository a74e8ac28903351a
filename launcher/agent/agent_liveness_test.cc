// The agent socket's secrets and hang detection, on fake processes, a fake
// clock and a fake /proc, with the real progress socket: datagrams are sent
// by the test itself, a process that is not a worker. Nothing sleeps: a
// local datagram is queued when sendto returns, so a Poll with a zero
// timeout sees it.
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/progress.h"
#include "common/worker_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/fake_processes.h"
#include "launcher/agent/liveness.h"
#include "launcher/agent/test_specs.h"

namespace elastrun::launcher {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

class FakeProcReader : public ProcReader {
 public:
  ProcSample Read(pid_t pid) override { return samples[pid]; }
  std::map<pid_t, ProcSample> samples;
};

std::string TempDir() {
  const char* tmp = getenv("TMPDIR");
  std::string dir =
      absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/agentlive-XXXXXX");
  return mkdtemp(dir.data()) != nullptr ? dir : "";
}

std::string ReadAll(const std::string& path) {
  std::string out;
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  fclose(f);
  return out;
}

class AgentLivenessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    ASSERT_FALSE(dir_.empty());
    AgentOptions options;
    options.clock = &clock_;
    options.progress_socket = dir_ + "/agent.sock";
    options.on_progress = [this](const ProgressReport& r) { reports_.push_back(r); };
    options.on_barrier = [this](const BarrierArrival& a, auto reply) {
      arrivals_.push_back(a);
      reply(absl::OkStatus());
    };
    options.proc_reader = &proc_;
    options.stack_tool = stack_tool_;  // none: fake workers have no stacks to print
    options.console_stderr_fd = -1;
    auto fake = std::make_unique<FakeProcesses>();
    fake_ = fake.get();
    fake_->obeyed = {SIGTERM, SIGKILL};
    auto agent = Agent::Create(std::move(options), std::move(fake));
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
    sock_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un self{};
    self.sun_family = AF_UNIX;  // autobind: an address for barrier answers
    ASSERT_EQ(bind(sock_, reinterpret_cast<sockaddr*>(&self), sizeof(sa_family_t)), 0);
  }
  void TearDown() override {
    close(sock_);
    agent_.reset();
  }

  std::string stack_tool_;  // AgentOptions::stack_tool (set before SetUp)

  void Start(AttemptSpec spec) {
    agent_->Start(std::move(spec),
                  [this](auto outcome) { outcome_ = std::move(outcome); });
    Poll();
  }
  void Poll() {
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(agent_->Poll(absl::ZeroDuration()).ok());
  }
  void Send(const std::string& datagram) {
    sockaddr_un to{};
    to.sun_family = AF_UNIX;
    const std::string path = dir_ + "/agent.sock";
    memcpy(to.sun_path, path.data(), path.size());
    ASSERT_GE(sendto(sock_, datagram.data(), datagram.size(), 0,
                     reinterpret_cast<sockaddr*>(&to), sizeof to),
              0)
        << strerror(errno);
  }
  void Report(const std::string& secret, int rank, int64_t step) {
    ProgressReport r;
    r.secret = secret;
    r.rank = rank;
    r.step = step;
    Send(EncodeProgress(r));
  }
  void Arrive(const std::string& secret, int rank) {
    BarrierArrival a;
    a.secret = secret;
    a.rank = rank;
    a.name = "ready";
    Send(EncodeBarrier(a));
  }
  // What the agent answered to our barrier arrivals so far.
  std::string Answers() {
    std::string out;
    char buf[256];
    ssize_t n;
    while ((n = recv(sock_, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
      out.append(buf, static_cast<size_t>(n)).append(";");
    }
    return out;
  }
  // The secret the agent gave worker `i` (from its environment).
  std::string SecretOf(size_t i) {
    const std::string prefix = absl::StrCat(env::kAgentSecret, "=");
    for (const std::string& e : fake_->proc(fake_->spawned()[i]).spec.env) {
      if (absl::StartsWith(e, prefix)) return e.substr(prefix.size());
    }
    return "";
  }

  std::string dir_;
  FakeClock clock_;
  FakeProcReader proc_;
  FakeProcesses* fake_ = nullptr;
  std::unique_ptr<Agent> agent_;
  int sock_ = -1;
  std::vector<ProgressReport> reports_;
  std::vector<BarrierArrival> arrivals_;
  std::optional<absl::StatusOr<AttemptOutcome>> outcome_;
};

TEST_F(AgentLivenessTest, DatagramsWithoutALiveWorkersSecretAreDropped) {
  Start(testing::AttemptOf({{"w"}, {"w"}}));
  const std::string s0 = SecretOf(0), s1 = SecretOf(1);
  ASSERT_TRUE(ValidSecret(s0));
  ASSERT_EQ(s0.size(), 32u);
  EXPECT_NE(s0, s1);

  // A stranger: well-formed datagrams, no secret or a wrong one.
  Report("", 1, 5);
  Report(NewAgentSecret(), 1, 5);
  Arrive("", 0);
  Arrive(NewAgentSecret(), 1);
  Poll();
  EXPECT_THAT(reports_, IsEmpty());
  EXPECT_THAT(arrivals_, IsEmpty());
  EXPECT_EQ(Answers(), "");  // nothing released
  EXPECT_EQ(agent_->dropped_datagrams(), 4u);

  // A worker passes, as the rank its secret was made for, whatever it says.
  Report(s1, /*rank=*/0, 7);
  Arrive(s1, /*rank=*/0);
  Poll();
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_EQ(reports_[0].rank, 1);
  EXPECT_EQ(reports_[0].step, 7);
  ASSERT_EQ(arrivals_.size(), 1u);
  EXPECT_EQ(arrivals_[0].rank, 1);
  EXPECT_EQ(Answers(), "ok;");

  // Once the attempt ended its secrets are worth nothing.
  for (pid_t pid : fake_->spawned()) fake_->Exit(pid, ExitedWith(0));
  Poll();
  ASSERT_TRUE(outcome_.has_value());
  Report(s1, 1, 8);
  Poll();
  EXPECT_EQ(reports_.size(), 1u);
  EXPECT_EQ(agent_->dropped_datagrams(), 5u);
}

// A worker's secret binds its job and its node's worker count too: a worker
// of job b that names job a (another user's, on a root daemon) posts as b
// and arrives at b's barrier, counted among b's one worker.
TEST_F(AgentLivenessTest, ASecretBindsTheJobAndLocalWorldSizeWhateverTheDatagramSays) {
  AttemptSpec a = testing::AttemptOf({{"w"}, {"w"}});
  a.job_id = "a-1";
  AttemptSpec b = testing::AttemptOf({{"w"}});
  b.job_id = "b-2";
  Start(std::move(a));
  Start(std::move(b));
  ASSERT_EQ(fake_->spawned().size(), 3u);
  const std::string of_b = SecretOf(2);
  ASSERT_TRUE(ValidSecret(of_b));

  ProgressReport forged;
  forged.job_id = "a-1";
  forged.secret = of_b;
  forged.rank = 0;
  forged.step = 999003;
  Send(EncodeProgress(forged));
  BarrierArrival arrival;
  arrival.job_id = "a-1";
  arrival.secret = of_b;
  arrival.rank = 1;
  arrival.local_world_size = 2;
  arrival.name = "gate";
  Send(EncodeBarrier(arrival));
  Poll();
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_EQ(reports_[0].job_id, "b-2");
  EXPECT_EQ(reports_[0].step, 999003);
  ASSERT_EQ(arrivals_.size(), 1u);
  EXPECT_EQ(arrivals_[0].job_id, "b-2");
  EXPECT_EQ(arrivals_[0].local_world_size, 1);
  EXPECT_EQ(arrivals_[0].rank, 0);
}

// A worker that no signal ends (D state) does not hold its attempt for
// ever: it ends once SIGKILL's reap limit passed, naming the worker.
TEST_F(AgentLivenessTest, AWorkerSigkillCannotEndIsGivenUpOnAndTheAttemptEnds) {
  Start(testing::AttemptOf({{"w"}, {"w"}}));
  const pid_t stuck = fake_->spawned()[1];
  fake_->unkillable = {stuck};
  fake_->Exit(fake_->spawned()[0], ExitedWith(1));
  Poll();
  for (int s = 0; s < 120 && !outcome_.has_value(); ++s) {
    clock_.Advance(absl::Seconds(1));
    Poll();
  }
  ASSERT_TRUE(outcome_.has_value()) << "the attempt never ended";
  ASSERT_TRUE(outcome_->ok()) << outcome_->status();
  const AttemptOutcome& o = **outcome_;
  EXPECT_EQ(o.kind, AttemptOutcome::Kind::kFailed);
  ASSERT_TRUE(o.first_failure.has_value());
  EXPECT_EQ(o.first_failure->rank, 0);
  ASSERT_EQ(o.unreaped.size(), 1u);
  EXPECT_EQ(o.unreaped[0].pid, stuck);
  EXPECT_EQ(o.unreaped[0].rank, 1);
}

TEST_F(AgentLivenessTest, StoppedWorkerIsDeclaredHungDumpedAndFailsTheAttempt) {
  AttemptSpec spec = testing::AttemptOf({{"w"}, {"w"}});
  spec.hang_timeout = HangTimeout::After(absl::Seconds(10));
  spec.outputs[1].stderr_log = dir_ + "/stderr1.log";
  Start(std::move(spec));
  const pid_t p0 = fake_->spawned()[0], p1 = fake_->spawned()[1];
  Report(SecretOf(0), 0, 1);
  Report(SecretOf(1), 1, 1);
  proc_.samples[p0] = {true, 'S', 10, false};
  proc_.samples[p1] = {true, 'T', 10, /*catches_sigusr1=*/true};  // SIGSTOPped
  Poll();
  // Rank 0 goes on; rank 1 never does.
  for (int t = 1; t <= 9; ++t) {
    clock_.Advance(absl::Seconds(1));
    Report(SecretOf(0), 0, 1 + t);
    Poll();
  }
  EXPECT_THAT(fake_->process_signals(), IsEmpty());
  clock_.Advance(absl::Seconds(1));
  Poll();
  // Declared: resumed and asked for its own stacks; the group still runs
  // while it writes them.
  EXPECT_EQ(fake_->process_signals(),
            (std::vector<std::pair<pid_t, int>>{{p1, SIGCONT}, {p1, SIGUSR1}}));
  EXPECT_THAT(ReadAll(dir_ + "/stderr1.log"),
              HasSubstr("elastrun: rank 1 hung at step 1 (no progress for 10s)"));
  EXPECT_FALSE(outcome_.has_value());
  ASSERT_TRUE(agent_->Poll(absl::ZeroDuration()).ok());
  clock_.Advance(absl::Seconds(2));
  Poll();
  ASSERT_TRUE(outcome_.has_value());
  ASSERT_TRUE(outcome_->ok()) << outcome_->status();
  const AttemptOutcome& o = **outcome_;
  EXPECT_EQ(o.kind, AttemptOutcome::Kind::kFailed);
  ASSERT_TRUE(o.first_failure.has_value());
  EXPECT_EQ(o.first_failure->rank, 1);
  EXPECT_TRUE(o.first_failure->hung);
  EXPECT_EQ(o.first_failure->hung_step, 1);
  EXPECT_EQ(o.first_failure->hung_for, absl::Seconds(10));
  EXPECT_EQ(o.first_failure->signal, SIGTERM);  // how it ended when stopped
  EXPECT_NE(o.first_failure->ShellCode(), 0);
}

// The native stack tool (eu-stack) of a hung worker runs as the worker's
// user: a root agent never parses another user's ELF and DWARF as root.
class AgentStackToolTest : public AgentLivenessTest {
 protected:
  void SetUp() override {
    stack_tool_ = "/bin/true";  // stands for eu-stack: what matters is how it is started
    AgentLivenessTest::SetUp();
  }
};

TEST_F(AgentStackToolTest, RunsAsTheHungWorkersUser) {
  AttemptSpec spec = testing::AttemptOf({{"w"}, {"w"}});
  spec.hang_timeout = HangTimeout::After(absl::Seconds(10));
  for (WorkerSpec& w : spec.workers) w.process.run_as = ProcessCredentials{65534, 65534, {}};
  Start(std::move(spec));
  const pid_t p1 = fake_->spawned()[1];
  Report(SecretOf(0), 0, 1);
  Report(SecretOf(1), 1, 1);
  proc_.samples[fake_->spawned()[0]] = {true, 'S', 10, false};
  proc_.samples[p1] = {true, 'S', 10, false};
  Poll();
  for (int t = 1; t <= 10; ++t) {
    clock_.Advance(absl::Seconds(1));
    Report(SecretOf(0), 0, 1 + t);
    Poll();
  }
  ASSERT_EQ(fake_->spawned().size(), 3u);  // the two workers, then the tool
  const ProcessSpec& tool = fake_->proc(fake_->spawned()[2]).spec;
  EXPECT_EQ(tool.argv, (std::vector<std::string>{"/bin/true", "-p", absl::StrCat(p1)}));
  ASSERT_TRUE(tool.run_as.has_value());
  EXPECT_EQ(tool.run_as->uid, 65534u);
  EXPECT_EQ(tool.run_as->gid, 65534u);
}

TEST_F(AgentLivenessTest, NoDetectionWhenOff) {
  AttemptSpec spec = testing::AttemptOf({{"w"}});
  spec.hang_timeout = HangTimeout::Off();
  Start(std::move(spec));
  proc_.samples[fake_->spawned()[0]] = {true, 'T', 0, true};
  for (int t = 0; t < 5; ++t) {
    clock_.Advance(absl::Hours(1));
    Poll();
  }
  EXPECT_FALSE(outcome_.has_value());
  EXPECT_THAT(fake_->process_signals(), IsEmpty());
  agent_->Stop(1, SIGKILL);
  Poll();
  EXPECT_TRUE(outcome_.has_value());
}

}  // namespace
}  // namespace elastrun::launcher
