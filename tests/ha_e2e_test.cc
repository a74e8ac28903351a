// End to end: the control plane with no single point of failure — three
// elastrun-rendezvous replicas over a real three-member etcd (Debian's
// etcd-server on loopback; skipped where it is not installed), real
// daemons, the real CLI and shell workers. The leader is SIGKILLed while a
// 2-node job prints, paused past its lease, etcd loses a member, then all of
// them. Every wait is on an event or a poll with a generous deadline.
#include <signal.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/etcd.h"
#include "tests/testing/subprocess.h"

namespace elastrun::daemon_testing {
namespace {

// Every rank prints numbered lines ("r<RANK>-a<RESTART>-<i>"). In the first
// attempt rank 1 exits 3 once the file $HA_DIR/fail exists; a later attempt
// prints 20 lines and exits 0, as does the first when $HA_DIR/finish exists.
constexpr char kScript[] = R"(i=0
while [ $i -lt 3000 ]; do
  echo "r$RANK-a$TORCHELASTIC_RESTART_COUNT-$i"
  i=$((i+1))
  if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ] && [ -e "$HA_DIR/fail" ]; then exit 3; fi
  if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ -e "$HA_DIR/finish" ]; then exit 0; fi
  if [ "$TORCHELASTIC_RESTART_COUNT" != 0 ] && [ $i -ge 20 ]; then exit 0; fi
  sleep 0.05
done)";

class HaE2eTest : public ClusterTest {
 protected:
  void SetUp() override {
    if (const std::string why = testing::EtcdMissing(); !why.empty()) GTEST_SKIP() << why;
    MakeCluster("ha_e2e");
    etcd_ = std::make_unique<testing::EtcdCluster>(dir_, marker_, 3);
    ASSERT_NO_FATAL_FAILURE(etcd_->Start());
    std::vector<std::string> endpoints;
    for (int i = 0; i < 3; ++i) {
      ports_.push_back(testing::FreeLoopbackPort());
      endpoints.push_back(absl::StrCat("127.0.0.1:", ports_.back()));
    }
    endpoints_ = absl::StrJoin(endpoints, ",");
    for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(StartReplica(i));
    ASSERT_TRUE(PollUntil([&] { return Leader() >= 0; })) << ReplicaOutput();
    cluster_->AttachService(endpoints_);
    setenv("HA_DIR", dir_.c_str(), 1);
  }

  void TearDown() override {
    for (auto& r : replicas_) {
      if (r && !r->exit_code()) {
        r->Signal(SIGCONT);
        r->Signal(SIGTERM);
        EXPECT_TRUE(r->Wait(kDeadline).ok());
        EXPECT_EQ(r->exit_code(), 0) << r->Output();
      }
    }
    for (auto& p : clients_) p.reset();
    etcd_.reset();  // SIGKILLs the members
    ClusterTest::TearDown();
  }

  void StartReplica(int i, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {testing::BinDir() + "/elastrun-rendezvous",
                                     "--listen",
                                     absl::StrCat("127.0.0.1:", ports_[i]),
                                     "--store",
                                     etcd_->url(),
                                     "--leader-lease",
                                     "2s",
                                     "--token-file",
                                     cluster_->token_file()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = testing::Subprocess::Start(argv, {marker_});
    ASSERT_TRUE(r.ok()) << r.status();
    if (replicas_.size() <= static_cast<size_t>(i)) replicas_.resize(i + 1);
    replicas_[i] = *std::move(r);
  }

  // Times replica i started serving (it prints "listening on" each time it
  // comes to lead) and stepped down (it re-executes itself).
  int Led(int i) const { return CountOf(replicas_[i]->Output(), "listening on "); }
  int SteppedDown(int i) const {
    return CountOf(replicas_[i]->Output(), "stepping down");
  }
  static int CountOf(const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos;
         at = text.find(what, at + 1))
      ++n;
    return n;
  }
  // The replica that leads now (it serves, and has not stepped down since),
  // or -1. A paused leader counts until it wakes and steps down.
  int Leader() const {
    int leader = -1;
    for (size_t i = 0; i < replicas_.size(); ++i) {
      if (!replicas_[i]->exit_code() && Led(i) > SteppedDown(i))
        leader = static_cast<int>(i);
    }
    return leader;
  }
  std::string ReplicaOutput() const {
    std::string out;
    for (size_t i = 0; i < replicas_.size(); ++i) {
      absl::StrAppend(&out, "\n--- replica ", i, " ---\n", replicas_[i]->Output());
    }
    return out;
  }

  std::vector<std::string> Cli(const std::vector<std::string>& args,
                               const std::string& rendezvous = "") const {
    // The command, the service, then its own arguments (a submit's program
    // follows "--").
    std::vector<std::string> argv = {testing::BinDir() + "/elastrun", args.at(0),
                                     "--rendezvous",
                                     rendezvous.empty() ? endpoints_ : rendezvous};
    argv.insert(argv.end(), args.begin() + 1, args.end());
    return argv;
  }
  std::vector<std::string> CliEnv() const {
    return {marker_, "ELASTRUN_TOKEN_FILE=" + cluster_->token_file()};
  }
  // A CLI command left running (logs -f, wait).
  testing::Subprocess* Follow(const std::vector<std::string>& args,
                              const std::string& rendezvous = "") {
    auto p = testing::Subprocess::Start(Cli(args, rendezvous), CliEnv());
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    clients_.push_back(*std::move(p));
    return clients_.back().get();
  }

  // Submits the 2-node job of kScript; its id.
  std::string SubmitJob(const std::string& name, const std::string& rendezvous = "") {
    absl::StatusOr<testing::RunResult> r =
        testing::Run(Cli({"submit", "--name", name, "--nnodes", "2", "--nproc-per-node",
                          "1", "--max-restarts", "2", "--", "/bin/sh", "-c", kScript},
                         rendezvous),
                     CliEnv());
    EXPECT_TRUE(r.ok() && r->exit_code == 0)
        << (r.ok() ? r->output : r.status().ToString());
    if (!r.ok()) return "";
    // The id is the last line (a retry is said before it).
    const std::vector<std::string> lines =
        absl::StrSplit(absl::StripAsciiWhitespace(r->output), '\n');
    return lines.back();
  }

  void StartTwoNodes() {
    for (int i = 0; i < 2; ++i) ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());
    ASSERT_TRUE(PollUntil([&] { return cluster_->WatchingNodes() == 2; }))
        << cluster_->DaemonOutput() << ReplicaOutput();
  }

  // Waits until replica `old`'s leadership is over and another one leads;
  // returns it (-1 after a failed expectation).
  int WaitNewLeader(int old) {
    int leader = -1;
    EXPECT_TRUE(PollUntil([&] {
      for (size_t i = 0; i < replicas_.size(); ++i) {
        if (static_cast<int>(i) != old && !replicas_[i]->exit_code() &&
            Led(i) > SteppedDown(i)) {
          leader = static_cast<int>(i);
          return true;
        }
      }
      return false;
    })) << ReplicaOutput();
    return leader;
  }

  std::unique_ptr<testing::EtcdCluster> etcd_;
  std::vector<int> ports_;
  std::string endpoints_;
  std::vector<std::unique_ptr<testing::Subprocess>> replicas_;
  std::vector<std::unique_ptr<testing::Subprocess>> clients_;
};

// The lines "r<rank>-a<attempt>-<i>" of `out`, counted.
std::map<std::string, int> Lines(const std::string& out) {
  std::map<std::string, int> seen;
  static const std::regex line("r[0-9]+-a[0-9]+-[0-9]+");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    ++seen[it->str()];
  }
  return seen;
}

// Each of rank's lines of `attempt` once, 0 up to the last one printed:
// nothing lost, nothing twice. Returns how many.
int ExpectEveryLineOnce(const std::map<std::string, int>& seen, int rank, int attempt) {
  const std::string prefix = absl::StrCat("r", rank, "-a", attempt, "-");
  int last = -1;
  for (const auto& [text, count] : seen) {
    if (!absl::StartsWith(text, prefix)) continue;
    EXPECT_EQ(count, 1) << text << " shown " << count << " times";
    last = std::max(last, std::stoi(text.substr(prefix.size())));
  }
  for (int i = 0; i <= last; ++i) {
    EXPECT_EQ(seen.count(absl::StrCat(prefix, i)), 1u) << prefix << i << " never shown";
  }
  return last + 1;
}

TEST_F(HaE2eTest, KillingTheLeaderLosesNoJobNoLogLineAndTheNextFailureIsHandled) {
  ASSERT_NO_FATAL_FAILURE(StartTwoNodes());
  const std::string job = SubmitJob("ha");
  ASSERT_FALSE(job.empty());
  testing::Subprocess* logs = Follow({"logs", "-f", job});
  testing::Subprocess* wait = Follow({"wait", job});
  ASSERT_NE(logs, nullptr);
  ASSERT_NE(wait, nullptr);
  ASSERT_TRUE(PollUntil([&] {
    const std::string out = logs->Output();
    return absl::StrContains(out, "r0-a0-10") && absl::StrContains(out, "r1-a0-10");
  })) << logs->Output()
      << ReplicaOutput();

  const int old = Leader();
  const absl::Time killed = absl::Now();
  replicas_[old]->Signal(SIGKILL);
  const int leader = WaitNewLeader(old);
  ASSERT_GE(leader, 0);
  std::cerr << "a follower led " << absl::FormatDuration(absl::Now() - killed)
            << " after the leader's SIGKILL\n";

  // The job's next worker failure is handled by the new leader: a restart,
  // then success.
  ASSERT_FALSE(testing::WriteOwnerOnlyFile(dir_ + "/fail", "1").empty());
  ASSERT_TRUE(wait->Wait(kDeadline).ok()) << wait->Output() << ReplicaOutput();
  EXPECT_EQ(wait->exit_code(), 0) << wait->Output() << ReplicaOutput();
  EXPECT_TRUE(absl::StrContains(wait->Output(), "SUCCEEDED")) << wait->Output();
  EXPECT_TRUE(absl::StrContains(wait->Output(), "1 restart")) << wait->Output();
  ASSERT_TRUE(logs->Wait(kDeadline).ok()) << logs->Output();
  EXPECT_EQ(logs->exit_code(), 0) << logs->Output();

  const std::map<std::string, int> seen = Lines(logs->Output());
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(ExpectEveryLineOnce(seen, rank, 0), 10) << logs->Output();
    EXPECT_EQ(ExpectEveryLineOnce(seen, rank, 1), 20) << logs->Output();
  }
  // The replica killed comes back as a follower.
  ASSERT_NO_FATAL_FAILURE(StartReplica(old));
  EXPECT_TRUE(PollUntil([&] {
    return absl::StrContains(replicas_[old]->Output(), "following the leader at");
  })) << replicas_[old]->Output();
  EXPECT_EQ(Leader(), leader);
}

// `elastrun run --rdzv-backend elastrun` given every replica: no node hosts
// the rendezvous, so losing the leader replica loses nothing of the run.
TEST_F(HaE2eTest, ARunAtTheReplicasOutlivesItsLeader) {
  std::vector<testing::Subprocess*> nodes;
  for (int h = 0; h < 2; ++h) {
    auto node = testing::Subprocess::Start({testing::BinDir() + "/elastrun",
                                            "run",
                                            "--nnodes",
                                            "2",
                                            "--nproc-per-node",
                                            "1",
                                            "--max-restarts",
                                            "2",
                                            "--rdzv-backend",
                                            "elastrun",
                                            "--rdzv-endpoint",
                                            endpoints_,
                                            "--rdzv-id",
                                            "harun",
                                            "--log-dir",
                                            absl::StrCat(dir_, "/run-", h),
                                            "--no-python",
                                            "/bin/sh",
                                            "-c",
                                            kScript},
                                           CliEnv());
    ASSERT_TRUE(node.ok()) << node.status();
    clients_.push_back(*std::move(node));
    nodes.push_back(clients_.back().get());
  }
  auto both = [&] { return nodes[0]->Output() + nodes[1]->Output(); };
  ASSERT_TRUE(PollUntil([&] {
    const std::string out = both();
    return absl::StrContains(out, "r0-a0-10") && absl::StrContains(out, "r1-a0-10");
  })) << both()
      << ReplicaOutput();

  const int old = Leader();
  replicas_[old]->Signal(SIGKILL);
  ASSERT_TRUE(replicas_[old]->Wait(kDeadline).ok());
  ASSERT_GE(WaitNewLeader(old), 0);
  // The workers went on through the failover; the next failure is handled
  // by the new leader: every node restarts, then the run succeeds.
  ASSERT_FALSE(testing::WriteOwnerOnlyFile(dir_ + "/fail", "1").empty());
  for (testing::Subprocess* node : nodes) {
    ASSERT_TRUE(node->Wait(kDeadline).ok()) << both() << ReplicaOutput();
    EXPECT_EQ(node->exit_code(), 0) << both() << ReplicaOutput();
    EXPECT_TRUE(
        absl::StrContains(node->Output(), "run harun succeeded after 1 restart(s)"))
        << node->Output();
  }
  const std::map<std::string, int> seen = Lines(both());
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(ExpectEveryLineOnce(seen, rank, 0), 10) << both();
    EXPECT_EQ(ExpectEveryLineOnce(seen, rank, 1), 20) << both();
  }
  // One job for the run, though both nodes submitted it.
  absl::StatusOr<testing::RunResult> list = testing::Run(Cli({"list"}), CliEnv());
  ASSERT_TRUE(list.ok() && list->exit_code == 0) << (list.ok() ? list->output : "");
  EXPECT_EQ(CountOf(list->output, "harun-"), 1) << list->output;
}

TEST_F(HaE2eTest, ALeaderPausedPastItsLeaseIsFencedAndStepsDown) {
  ASSERT_NO_FATAL_FAILURE(StartTwoNodes());
  const int old = Leader();
  replicas_[old]->Signal(SIGSTOP);
  const int leader = WaitNewLeader(old);
  ASSERT_GE(leader, 0);
  const std::string at_leader = absl::StrCat("127.0.0.1:", ports_[leader]);
  const std::string at_old = absl::StrCat("127.0.0.1:", ports_[old]);
  const std::string job = SubmitJob("after", at_leader);
  ASSERT_FALSE(job.empty());

  // A submit waits in the paused replica's socket; when it wakes it must not
  // store it: either its write is refused or it learns first that its lease
  // is gone. Either way it steps down, and comes back as a follower that
  // passes calls to the leader: a retry of the submit may be stored there.
  testing::Subprocess* late = Follow({"submit", "--name", "late", "--nnodes", "1",
                                      "--retry-for", "5s", "--", "/bin/true"},
                                     at_old);
  ASSERT_NE(late, nullptr);
  replicas_[old]->Signal(SIGCONT);
  ASSERT_TRUE(PollUntil([&] { return SteppedDown(old) >= 1; }))
      << replicas_[old]->Output();
  const std::string said = replicas_[old]->Output();
  EXPECT_TRUE(absl::StrContains(said, "no longer leads") ||
              absl::StrContains(said, "expired"))
      << said;
  ASSERT_TRUE(late->Wait(kDeadline).ok());
  EXPECT_TRUE(PollUntil([&] {
    return CountOf(replicas_[old]->Output(), "following the leader at " + at_leader) >= 1;
  })) << replicas_[old]->Output();

  // The leader's state has the job submitted to it, and the late one only
  // if a retry reached it through the follower: then once, under the id the
  // CLI printed. A job the paused replica had stored would be missing.
  absl::StatusOr<testing::RunResult> list = testing::Run(Cli({"list"}), CliEnv());
  ASSERT_TRUE(list.ok() && list->exit_code == 0) << (list.ok() ? list->output : "");
  EXPECT_TRUE(absl::StrContains(list->output, job)) << list->output;
  if (late->exit_code() == 0) {
    // The id is the submit's last line (retries are said before it).
    const std::vector<std::string> said_lines =
        absl::StrSplit(absl::StripAsciiWhitespace(late->Output()), '\n');
    const std::string& id = said_lines.back();
    EXPECT_TRUE(absl::StrContains(list->output, id)) << id << "\n" << list->output;
    int lines_late = 0;
    for (absl::string_view l : absl::StrSplit(list->output, '\n')) {
      if (absl::StrContains(l, "late")) ++lines_late;
    }
    EXPECT_EQ(lines_late, 1) << list->output;
  } else {
    EXPECT_FALSE(absl::StrContains(list->output, "late")) << list->output;
  }
  EXPECT_EQ(Leader(), leader);
}

// A follower passes every call to the leader: the CLI given one follower
// alone submits, follows the logs and waits as it would at the leader.
TEST_F(HaE2eTest, AFollowerPassesEveryCallToTheLeader) {
  ASSERT_NO_FATAL_FAILURE(StartTwoNodes());
  const int leader = Leader();
  const int follower = (leader + 1) % 3;
  // This follower again, with --follower-proxy.
  replicas_[follower]->Signal(SIGTERM);
  ASSERT_TRUE(replicas_[follower]->Wait(kDeadline).ok());
  ASSERT_NO_FATAL_FAILURE(StartReplica(follower, {"--follower-proxy"}));
  ASSERT_TRUE(PollUntil([&] {
    return absl::StrContains(replicas_[follower]->Output(),
                             "passing calls to the leader at");
  })) << replicas_[follower]->Output();
  const std::string at = absl::StrCat("127.0.0.1:", ports_[follower]);
  const std::string job = SubmitJob("via-follower", at);
  ASSERT_FALSE(job.empty()) << ReplicaOutput();
  testing::Subprocess* logs = Follow({"logs", "-f", job}, at);
  testing::Subprocess* wait = Follow({"wait", job}, at);
  ASSERT_NE(logs, nullptr);
  ASSERT_NE(wait, nullptr);
  ASSERT_TRUE(PollUntil([&] {
    const std::string out = logs->Output();
    return absl::StrContains(out, "r0-a0-5") && absl::StrContains(out, "r1-a0-5");
  })) << logs->Output()
      << ReplicaOutput();
  ASSERT_FALSE(testing::WriteOwnerOnlyFile(dir_ + "/finish", "1").empty());
  ASSERT_TRUE(wait->Wait(kDeadline).ok()) << wait->Output();
  EXPECT_EQ(wait->exit_code(), 0) << wait->Output();
  EXPECT_TRUE(absl::StrContains(wait->Output(), "SUCCEEDED")) << wait->Output();
  ASSERT_TRUE(logs->Wait(kDeadline).ok()) << logs->Output();
  EXPECT_EQ(logs->exit_code(), 0) << logs->Output();
  const std::map<std::string, int> seen = Lines(logs->Output());
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(ExpectEveryLineOnce(seen, rank, 0), 5) << logs->Output();
  }
  // It stayed a follower, and said where its calls went.
  EXPECT_EQ(Leader(), leader);
  EXPECT_EQ(Led(follower), 0) << replicas_[follower]->Output();
  EXPECT_TRUE(absl::StrContains(
      replicas_[follower]->Output(),
      absl::StrCat("passing calls to the leader at 127.0.0.1:", ports_[leader])))
      << replicas_[follower]->Output();
}

TEST_F(HaE2eTest, LosingEtcdsLeaderMemberDoesNotDisturbJobs) {
  ASSERT_NO_FATAL_FAILURE(StartTwoNodes());
  const std::string job = SubmitJob("member");
  ASSERT_FALSE(job.empty());
  testing::Subprocess* wait = Follow({"wait", job});
  ASSERT_NE(wait, nullptr);
  ASSERT_TRUE(PollUntil([&] {
    return absl::StrContains(cluster_->Logs(job, 0, 1), "r0-a0-5");
  })) << cluster_->DaemonOutput();
  const int leader = Leader();
  // etcd's own leader: its loss costs etcd an election, and the requests
  // it held are dropped.
  const int member = etcd_->LeaderMember();
  ASSERT_GE(member, 0) << etcd_->Output();
  etcd_->Kill(member);
  // Jobs go on: another one is submitted and the first finishes, with no
  // restart and the same leader.
  const std::string second = SubmitJob("second");
  EXPECT_FALSE(second.empty());
  ASSERT_FALSE(testing::WriteOwnerOnlyFile(dir_ + "/finish", "1").empty());
  ASSERT_TRUE(wait->Wait(kDeadline).ok()) << wait->Output();
  EXPECT_EQ(wait->exit_code(), 0) << wait->Output();
  EXPECT_TRUE(absl::StrContains(wait->Output(), "0 restarts")) << wait->Output();
  EXPECT_EQ(Leader(), leader) << ReplicaOutput();
  for (size_t i = 0; i < replicas_.size(); ++i)
    EXPECT_EQ(SteppedDown(i), 0) << ReplicaOutput();
}

TEST_F(HaE2eTest, WithEveryEtcdMemberDownWorkersGoOnAndTheServiceComesBack) {
  ASSERT_NO_FATAL_FAILURE(StartTwoNodes());
  const std::string job = SubmitJob("dark");
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(PollUntil([&] {
    return absl::StrContains(cluster_->Logs(job, 0, 1), "r1-a0-5");
  })) << cluster_->DaemonOutput();
  const int leader = Leader();
  for (int m = 0; m < 3; ++m) etcd_->Kill(m);

  // The service says so: the leader steps down, and no replica serves
  // while etcd is away, saying why.
  ASSERT_TRUE(PollUntil([&] { return SteppedDown(leader) >= 1; })) << ReplicaOutput();
  EXPECT_TRUE(PollUntil([&] {
    return absl::StrContains(replicas_[leader]->Output(), "not serving: etcd at ");
  })) << replicas_[leader]->Output();
  EXPECT_EQ(Leader(), -1);
  // The workers go on: their output keeps growing.
  const std::string before = cluster_->Logs(job, 0, 1);
  EXPECT_TRUE(
      PollUntil([&] { return cluster_->Logs(job, 0, 1).size() > before.size() + 100; }));

  for (int m = 0; m < 3; ++m) ASSERT_NO_FATAL_FAILURE(etcd_->Restart(m));
  ASSERT_TRUE(PollUntil([&] { return Leader() >= 0; }))
      << ReplicaOutput() << etcd_->Output();
  ASSERT_FALSE(testing::WriteOwnerOnlyFile(dir_ + "/finish", "1").empty());
  absl::StatusOr<testing::RunResult> waited = testing::Run(Cli({"wait", job}), CliEnv());
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(waited->exit_code, 0) << waited->output << ReplicaOutput();
  EXPECT_TRUE(absl::StrContains(waited->output, "SUCCEEDED (round 0")) << waited->output;
}

}  // namespace
}  // namespace elastrun::daemon_testing
