// End-to-end: the real elastrun-rendezvous (port 0), real elastrund
// processes and the C++ test worker (c10d TCPStore + Gloo), driven through
// the Jobs API by a small gRPC client. Everything started is tagged with a
// unique environment entry; nothing may be left behind.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <csignal>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace elastrun::daemon_testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::ProcessesWithEnv;

class DaemonE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("daemon_e2e");
    // The daemons inherit it: snapshot folders stay off the real /dev/shm.
    setenv("ELASTRUN_SNAPSHOT_BASE", dir_.c_str(), 1);
    marker_ =
        absl::StrCat("ELASTRUN_TEST_MARKER=daemon-",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-",
                     getpid(), "-", dir_);
    cluster_ = std::make_unique<Cluster>(dir_, marker_);
    ASSERT_NO_FATAL_FAILURE(cluster_->StartService("127.0.0.1:0"));
    for (int i = 0; i < 2; ++i) ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());
    ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 2; }))
        << "daemons did not register" << cluster_->DaemonOutput();
  }
  void TearDown() override { cluster_->StopAll(); }

  // A 2x2 job (or MIN:MAX x 2) of the test worker with `args`; workers get
  // ELASTRUN_TEST_JOB=`job_marker` when given.
  std::string Submit(const std::string& name, const std::vector<std::string>& args,
                     int max_restarts, const std::string& job_marker = "",
                     int min_nodes = 2, int max_nodes = 2) {
    v1::JobSpec spec = Spec(name, min_nodes, max_nodes, 2, max_restarts);
    if (!job_marker.empty()) (*spec.mutable_env())["ELASTRUN_TEST_JOB"] = job_marker;
    return cluster_->Submit(spec, args);
  }
  v1::JobStatus WaitFinished(const std::string& job) {
    return cluster_->WaitFinished(job);
  }
  std::string DaemonOutput() const { return cluster_->DaemonOutput(); }
  std::string Logs(const std::string& job, int64_t round) const {
    return cluster_->Logs(job, round);
  }

  std::string dir_, marker_;
  std::unique_ptr<Cluster> cluster_;
};

// `logs -f` of a 2-node job whose rank 0 fails: the other ranks print a
// last line as they are stopped (SIGTERM), on both nodes; every one of
// them is shown before `logs -f` ends, and it ends non-zero as `wait` does.
TEST_F(DaemonE2eTest, LogsFollowOfAFailedTwoNodeJobShowsEveryNodesLastLines) {
  const std::string go = dir_ + "/go";
  v1::JobSpec spec = Spec("last", 2, 2, 2, /*max_restarts=*/0);
  for (const std::string& a :
       {std::string("/bin/sh"), std::string("-c"),
        absl::StrCat("trap 'echo \"last line of rank $RANK\"; exit 3' TERM; ",
                     "echo \"started $RANK\"; ",
                     "if [ \"$RANK\" = 0 ]; then while [ ! -e ", go,
                     " ]; do sleep 0.02; done; echo 'rank 0 fails'; exit 1; fi; ",
                     "while :; do sleep 0.02; done")}) {
    spec.add_argv(a);
  }
  const std::string job = cluster_->SubmitSpec(spec);
  ASSERT_FALSE(job.empty());
  auto follow = testing::Subprocess::Start(
      {testing::BinDir() + "/elastrun", "logs", "-f", "--rendezvous", cluster_->address(),
       job},
      {marker_, "ELASTRUN_TOKEN_FILE=" + cluster_->token_file()});
  ASSERT_TRUE(follow.ok()) << follow.status();
  ASSERT_TRUE(PollUntil([&] {
    const std::string out = (*follow)->Output();
    for (int rank = 0; rank < 4; ++rank) {
      if (!absl::StrContains(out, absl::StrCat("started ", rank))) return false;
    }
    return true;
  })) << (*follow)->Output()
      << DaemonOutput();
  ASSERT_FALSE(testing::WriteFile(go, "go\n").empty());
  ASSERT_TRUE((*follow)->Wait(kDeadline).ok());
  const std::string out = (*follow)->Output();
  EXPECT_EQ((*follow)->exit_code(), 1) << out;
  EXPECT_THAT(out, HasSubstr("[rank0]:rank 0 fails"));
  for (int rank = 1; rank < 4; ++rank) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("[rank", rank, "]:last line of rank ", rank)))
        << DaemonOutput();
  }
  EXPECT_THAT(out, HasSubstr("FAILED"));
}

TEST_F(DaemonE2eTest, ThreeByTwoJobSucceeds) {
  // The case: three daemons (distinct node ids), a 3x2 job.
  ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());
  // Registered first: a job no registered nodes could hold is refused.
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 3; }));
  const std::string job = Submit("ok", {"--steps", "5"}, 0, "", 3, 3);
  v1::JobStatus st = WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << DaemonOutput();
  EXPECT_EQ(st.world_size(), 6);
  EXPECT_EQ(st.restarts(), 0);
  // Its history: one round, on the three nodes, that succeeded.
  ASSERT_EQ(st.history_size(), 1);
  EXPECT_EQ(st.history(0).assignment().nodes_size(), 3);
  EXPECT_EQ(st.nodes_size(), 3);
  // Workers' progress went worker -> agent socket -> daemon -> service; the
  // daemons send it before their exit reports, so the last step is there.
  EXPECT_EQ(st.last_progress().step(), 5) << st.last_progress().DebugString();
  EXPECT_EQ(st.last_progress().round(), 0);
  EXPECT_EQ(st.last_progress().metrics().at("world"), 6.0);
  // Each node ran two of the six ranks, and logged them per local rank.
  const std::string logs = Logs(job, 0);
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("rank ", rank, "/6 ok restart=0")));
  }
  // The daemons forwarded the output to the service (`elastrun logs`).
  std::string forwarded;
  EXPECT_TRUE(PollUntil([&] {
    forwarded = cluster_->ServiceLogs(job);
    for (int rank = 0; rank < 6; ++rank) {
      if (!absl::StrContains(forwarded, absl::StrCat("rank ", rank, "/6 ok")))
        return false;
    }
    return true;
  })) << forwarded;
}

// The latest time (ns) in DIR's files named PREFIX*, and the earliest.
std::pair<int64_t, int64_t> TimeRange(const std::string& dir, const std::string& prefix) {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const std::string& f : testing::ListFiles(dir, prefix)) {
    const int64_t t = std::stoll(testing::ReadFile(dir + "/" + f));
    lo = std::min(lo, t);
    hi = std::max(hi, t);
  }
  return {lo, hi};
}

TEST_F(DaemonE2eTest, WorkersMeetAtANamedBarrierThroughTheirDaemons) {
  const std::string dir = testing::MakeTempDir("daemon_e2e_barrier");
  // Rank 3 (on the second node) arrives half a second late: nobody, on
  // either node, may pass before it arrived.
  const std::string job = Submit("meet",
                                 {"--ready-dir", dir, "--agent-barrier", "sync-1",
                                  "--delay-rank", "3", "--delay-ms", "500"},
                                 0);
  v1::JobStatus st = WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << DaemonOutput();
  ASSERT_EQ(testing::ListFiles(dir, "arrive.0.").size(), 4u);
  ASSERT_EQ(testing::ListFiles(dir, "passed.0.").size(), 4u);
  const auto arrived = TimeRange(dir, "arrive.0.");
  const auto passed = TimeRange(dir, "passed.0.");
  EXPECT_LE(arrived.second, passed.first) << "a worker passed before the last arrived";
  EXPECT_GE(arrived.second - arrived.first, 400 * 1000 * 1000) << "rank 3 was not late";
}

TEST_F(DaemonE2eTest, SigkilledWorkerRestartsEveryNodeThenSucceeds) {
  const std::string job =
      Submit("kill", {"--fail-rank", "1", "--fail-mode", "sigkill"}, 1);
  v1::JobStatus st = WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << DaemonOutput();
  EXPECT_EQ(st.restarts(), 1);
  ASSERT_GE(st.history_size(), 2);
  EXPECT_EQ(st.history(0).end_reason(), "failure");
  ASSERT_GE(st.history(0).failures_size(), 1);
  EXPECT_EQ(st.history(0).failures(0).rank(), 1);
  EXPECT_EQ(st.history(0).failures(0).signal(), SIGKILL);
  const std::string logs = Logs(job, st.round());
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("rank ", rank, "/4 ok restart=1")));
  }
}

TEST_F(DaemonE2eTest, CancelLeavesNoWorkerOnAnyNode) {
  const std::string job_marker = absl::StrCat("cancel-", getpid(), "-", dir_);
  const std::string ready = testing::MakeTempDir("daemon_e2e_ready");
  const std::string job = Submit("hang", {"--hang", "--ready-dir", ready}, 0, job_marker);
  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.", 4, kDeadline).ok())
      << DaemonOutput();
  ASSERT_TRUE(cluster_->Cancel(job));
  EXPECT_EQ(WaitFinished(job).state(), v1::JOB_STATE_CANCELLED);
  const std::string entry = "ELASTRUN_TEST_JOB=" + job_marker;
  EXPECT_TRUE(PollUntil([&] { return ProcessesWithEnv(entry).empty(); }))
      << "workers left behind" << DaemonOutput();
}

TEST_F(DaemonE2eTest, SigtermToDaemonStopsItsWorkersAndExits) {
  const std::string job_marker = absl::StrCat("term-", getpid(), "-", dir_);
  const std::string ready = testing::MakeTempDir("daemon_e2e_ready");
  Submit("hang", {"--hang", "--ready-dir", ready}, 0, job_marker);
  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.", 4, kDeadline).ok())
      << DaemonOutput();
  for (size_t i = 0; i < 2; ++i) cluster_->daemon(i).Signal(SIGTERM);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(cluster_->daemon(i).Wait(kDeadline).ok());
    EXPECT_EQ(cluster_->daemon(i).exit_code(), 128 + SIGTERM)
        << cluster_->daemon(i).Output();
  }
  // The daemons reaped their workers before exiting.
  EXPECT_THAT(ProcessesWithEnv("ELASTRUN_TEST_JOB=" + job_marker), IsEmpty());
}

TEST_F(DaemonE2eTest, ServiceSigkilledAndRestartedJobGoesOnWithoutRestart) {
  const std::string ready = testing::MakeTempDir("daemon_e2e_ready");
  // About 4 s of training, so the service is back before it ends.
  const std::string job =
      Submit("svc", {"--steps", "40", "--step-ms", "100", "--ready-dir", ready}, 0);
  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.", 4, kDeadline).ok())
      << DaemonOutput();
  cluster_->service().Signal(SIGKILL);
  ASSERT_TRUE(cluster_->service().Wait(kDeadline).ok());
  // Same port, same state.
  ASSERT_NO_FATAL_FAILURE(cluster_->StartService(cluster_->address()));
  v1::JobStatus st = WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << DaemonOutput();
  // The daemons re-registered within the lease with their running attempt:
  // no node was lost, no new round.
  EXPECT_EQ(st.round(), 0) << st.DebugString();
  EXPECT_EQ(st.restarts(), 0);
  EXPECT_EQ(st.history_size(), 1);
  EXPECT_EQ(cluster_->AliveNodes(), 2);
}

TEST_F(DaemonE2eTest, DaemonSigkilledJobReformsOnSurvivors) {
  ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 3; }));
  const std::string ready = testing::MakeTempDir("daemon_e2e_ready");
  const std::string job = Submit(
      "lose", {"--steps", "30", "--step-ms", "50", "--ready-dir", ready}, 3, "", 2, 3);
  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.", 6, kDeadline).ok())
      << DaemonOutput();
  // The daemon dies; its workers die with it (parent-death signal).
  cluster_->daemon(2).Signal(SIGKILL);
  ASSERT_TRUE(cluster_->daemon(2).Wait(kDeadline).ok());
  v1::JobStatus st = WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << DaemonOutput();
  EXPECT_GE(st.round(), 1);
  EXPECT_EQ(st.world_size(), 4);
  // Depending on whether the survivors' workers saw the broken collective
  // before the service saw the broken stream, round 0 ended as a node loss
  // or as a failure.
  EXPECT_THAT(st.history(0).end_reason(), ::testing::AnyOf("node lost", "failure"));
}

TEST_F(DaemonE2eTest, FourthNodeJoiningMidJobScalesUp) {
  // The case: three nodes run a 2:4 job; a fourth registers.
  ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());
  const std::string ready = testing::MakeTempDir("daemon_e2e_ready");
  const std::string job = Submit(
      "grow", {"--steps", "60", "--step-ms", "50", "--ready-dir", ready}, 0, "", 2, 4);
  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.", 6, kDeadline).ok())
      << DaemonOutput();
  ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());
  v1::JobStatus st = WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << DaemonOutput();
  EXPECT_EQ(st.world_size(), 8);
  EXPECT_EQ(st.restarts(), 0);  // a membership change is not a restart
  EXPECT_EQ(st.history(0).end_reason(), "scale-up");
  const std::string logs = Logs(job, st.round());
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("rank ", rank, "/8 ok")));
  }
}

// One daemon with --slots 2 (Cluster's) running two 1x1 jobs at once.
class OneNodeTwoJobsE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("daemon_e2e_jobs");
    // The daemons inherit it: snapshot folders stay off the real /dev/shm.
    setenv("ELASTRUN_SNAPSHOT_BASE", dir_.c_str(), 1);
    cluster_ = std::make_unique<Cluster>(
        dir_, absl::StrCat("ELASTRUN_TEST_MARKER=daemon-jobs-", getpid(), "-", dir_));
    ASSERT_NO_FATAL_FAILURE(cluster_->StartService("127.0.0.1:0"));
    ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());
    ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }))
        << "the daemon did not register" << cluster_->DaemonOutput();
  }
  void TearDown() override { cluster_->StopAll(); }

  // A 1x1 job of the test worker; its worker carries ELASTRUN_TEST_JOB=marker.
  std::string Submit(const std::string& name, const std::vector<std::string>& args,
                     int max_restarts, const std::string& marker) {
    v1::JobSpec spec = Spec(name, 1, 1, 1, max_restarts);
    (*spec.mutable_env())["ELASTRUN_TEST_JOB"] = marker;
    return cluster_->Submit(spec, args);
  }

  std::string dir_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(OneNodeTwoJobsE2eTest, BothRunAtOnceAndEachRestartsAndEndsOnItsOwn) {
  const std::string marker_a = absl::StrCat("jobs-a-", getpid(), "-", dir_);
  const std::string marker_b = absl::StrCat("jobs-b-", getpid(), "-", dir_);
  const std::string ready_a = testing::MakeTempDir("daemon_e2e_ready_a");
  const std::string ready_b = testing::MakeTempDir("daemon_e2e_ready_b");
  // "a" hangs until stopped; "b" trains for about 20 s, long enough to
  // outlive a's restart and cancellation.
  constexpr int kSteps = 200;
  const std::string a = Submit("hang", {"--hang", "--ready-dir", ready_a}, 2, marker_a);
  const std::string b = Submit(
      "train",
      {"--steps", absl::StrCat(kSteps), "--step-ms", "100", "--ready-dir", ready_b}, 0,
      marker_b);
  // Both workers passed their first barrier: both run at once on the node.
  ASSERT_TRUE(testing::WaitForFiles(ready_a, "ready.0.", 1, kDeadline).ok())
      << cluster_->Get(a).DebugString() << cluster_->DaemonOutput();
  ASSERT_TRUE(testing::WaitForFiles(ready_b, "ready.0.", 1, kDeadline).ok())
      << cluster_->Get(b).DebugString() << cluster_->DaemonOutput();
  EXPECT_EQ(cluster_->Get(a).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(cluster_->Get(b).state(), v1::JOB_STATE_RUNNING);
  const std::vector<pid_t> b_workers = ProcessesWithEnv("ELASTRUN_TEST_JOB=" + marker_b);
  ASSERT_EQ(b_workers.size(), 1u);

  // Killing a's worker restarts a only.
  const std::vector<pid_t> a_workers = ProcessesWithEnv("ELASTRUN_TEST_JOB=" + marker_a);
  ASSERT_EQ(a_workers.size(), 1u);
  ASSERT_EQ(kill(a_workers[0], SIGKILL), 0);
  ASSERT_TRUE(testing::WaitForFiles(ready_a, "ready.1.", 1, kDeadline).ok())
      << cluster_->Get(a).DebugString() << cluster_->DaemonOutput();
  v1::JobStatus sa = cluster_->Get(a);
  EXPECT_EQ(sa.restarts(), 1);
  ASSERT_GE(sa.history_size(), 1);
  ASSERT_GE(sa.history(0).failures_size(), 1);
  EXPECT_EQ(sa.history(0).failures(0).signal(), SIGKILL);
  v1::JobStatus sb = cluster_->Get(b);
  ASSERT_EQ(sb.state(), v1::JOB_STATE_RUNNING)
      << "b ended before the test was done with a";
  EXPECT_EQ(sb.round(), 0);
  EXPECT_EQ(sb.restarts(), 0);
  EXPECT_EQ(ProcessesWithEnv("ELASTRUN_TEST_JOB=" + marker_b), b_workers);

  // Cancelling a leaves b running, to success.
  ASSERT_TRUE(cluster_->Cancel(a));
  EXPECT_EQ(cluster_->WaitFinished(a).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(PollUntil([&] {
    return ProcessesWithEnv("ELASTRUN_TEST_JOB=" + marker_a).empty();
  })) << "a's worker left behind"
      << cluster_->DaemonOutput();
  EXPECT_EQ(cluster_->Get(b).state(), v1::JOB_STATE_RUNNING)
      << "b ended before a was cancelled; the test proves less";
  EXPECT_EQ(ProcessesWithEnv("ELASTRUN_TEST_JOB=" + marker_b), b_workers);
  sb = cluster_->WaitFinished(b);
  ASSERT_EQ(sb.state(), v1::JOB_STATE_SUCCEEDED)
      << sb.DebugString() << cluster_->DaemonOutput();
  EXPECT_EQ(sb.restarts(), 0);
  EXPECT_EQ(sb.history_size(), 1);
  // b's progress and output reached b, not a.
  EXPECT_EQ(sb.last_progress().step(), kSteps) << sb.last_progress().DebugString();
  std::string forwarded;
  EXPECT_TRUE(PollUntil([&] {
    forwarded = cluster_->ServiceLogs(b);
    return absl::StrContains(forwarded, "rank 0/1 ok restart=0");
  })) << forwarded;
  EXPECT_THAT(cluster_->ServiceLogs(a), ::testing::Not(HasSubstr("rank 0/1 ok")));
}

}  // namespace
}  // namespace elastrun::daemon_testing
