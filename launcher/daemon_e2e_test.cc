// End-to-end: the real elastrun-rendezvous (port 0), two real elastrund
// processes and the C++ test worker (c10d TCPStore + Gloo), driven through
// the Jobs API by a small gRPC client. Everything started is tagged with a
// unique environment entry; nothing may be left behind.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "elastrun/v1/jobs.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::BinDir;
using testing::ProcessesWithEnv;
using testing::Subprocess;

constexpr absl::Duration kDeadline = absl::Seconds(90);
// Polling interval for states only visible through the API or a log file.
constexpr absl::Duration kPoll = absl::Milliseconds(20);

class DaemonE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("daemon_e2e");
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=daemon-",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                           "-", getpid(), "-", dir_);
    ASSERT_NO_FATAL_FAILURE(StartService("127.0.0.1:0"));
    for (int i = 0; i < 2; ++i) ASSERT_NO_FATAL_FAILURE(StartDaemon());
    ASSERT_TRUE(PollUntil([&] { return AliveNodes() == 2; })) << "daemons did not register";
  }

  // Starts elastrun-rendezvous on `listen` with its state in dir_/state.
  void StartService(const std::string& listen) {
    auto service = Subprocess::Start({BinDir() + "/elastrun-rendezvous", "--listen", listen,
                                      "--state-dir", dir_ + "/state"},
                                     {marker_});
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    const std::string prefix = "listening on ";
    ASSERT_TRUE(PollUntil([&] { return absl::StrContains(service_->Output(), prefix); }))
        << service_->Output();
    const std::string out = service_->Output();
    const size_t at = out.find(prefix) + prefix.size();
    address_ = out.substr(at, out.find('\n', at) - at);
    jobs_ = v1::Jobs::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    for (auto& d : daemons_) {
      if (d->exit_code()) continue;
      d->Signal(SIGTERM);
      absl::StatusOr<int> st = d->Wait(kDeadline);
      EXPECT_TRUE(st.ok()) << st.status();
      EXPECT_EQ(d->exit_code(), 128 + SIGTERM) << d->Output();
    }
    service_->Signal(SIGTERM);
    EXPECT_TRUE(service_->Wait(kDeadline).ok());
    EXPECT_THAT(ProcessesWithEnv(marker_), IsEmpty()) << "processes were left behind";
  }

  // Starts daemon "node<N>" (N: how many were started before).
  void StartDaemon() {
    const std::string id = absl::StrCat("node", daemons_.size());
    auto d = Subprocess::Start({BinDir() + "/elastrund", "--rendezvous", address_,
                                "--node-id", id, "--slots", "2", "--log-dir",
                                absl::StrCat(dir_, "/", id), "--shutdown-timeout", "5s"},
                               {marker_});
    ASSERT_TRUE(d.ok()) << d.status();
    daemons_.push_back(*std::move(d));
  }

  // Polls `done` every kPoll until it holds or kDeadline passes.
  static bool PollUntil(const std::function<bool()>& done) {
    const absl::Time end = absl::Now() + kDeadline;
    while (!done()) {
      if (absl::Now() > end) return false;
      absl::SleepFor(kPoll);
    }
    return true;
  }

  int AliveNodes() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ListNodesResponse resp;
    if (!jobs_->ListNodes(&ctx, v1::ListNodesRequest(), &resp).ok()) return -1;
    int alive = 0;
    for (const v1::NodeInfo& n : resp.nodes()) alive += n.state() == v1::NODE_STATE_ALIVE;
    return alive;
  }

  std::string Submit(const std::string& name, const std::vector<std::string>& worker_args,
                     int max_restarts, const std::string& job_marker = "",
                     int min_nodes = 2, int max_nodes = 2) {
    v1::SubmitRequest r;
    v1::JobSpec* s = r.mutable_spec();
    s->set_name(name);
    s->set_min_nodes(min_nodes);
    s->set_max_nodes(max_nodes);
    s->set_nproc_per_node(2);
    s->set_max_restarts(max_restarts);
    s->add_argv(BinDir() + "/elastrun-test-worker");
    for (const std::string& a : worker_args) s->add_argv(a);
    if (!job_marker.empty()) (*s->mutable_env())["ELASTRUN_TEST_JOB"] = job_marker;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::SubmitResponse resp;
    grpc::Status st = jobs_->Submit(&ctx, r, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job_id();
  }

  v1::JobStatus Get(const std::string& job) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetJobRequest r;
    r.set_job_id(job);
    v1::JobStatus s;
    grpc::Status st = jobs_->Get(&ctx, r, &s);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return s;
  }

  static bool Finished(v1::JobState s) {
    return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
           s == v1::JOB_STATE_CANCELLED;
  }

  v1::JobStatus WaitFinished(const std::string& job) {
    v1::JobStatus st;
    EXPECT_TRUE(PollUntil([&] {
      st = Get(job);
      return Finished(st.state());
    })) << "job " << job << " did not finish: " << st.DebugString() << DaemonOutput();
    return st;
  }

  std::string DaemonOutput() const {
    std::string out;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      absl::StrAppend(&out, "\n--- node", i, " ---\n", daemons_[i]->Output());
    }
    return out;
  }

  // The stdout logs of every node and local rank of `round`, concatenated.
  std::string Logs(const std::string& job, int64_t round) const {
    std::string logs;
    for (size_t node = 0; node < daemons_.size(); ++node) {
      for (int local = 0; local < 2; ++local) {
        absl::StrAppend(&logs, Log(static_cast<int>(node), job, round, local));
      }
    }
    return logs;
  }

  std::string Log(int node, const std::string& job, int64_t round, int local_rank) const {
    return testing::ReadFile(absl::StrCat(dir_, "/node", node, "/", job, "/attempt_", round,
                                          "/", local_rank, "/stdout.log"));
  }

  std::string dir_, marker_, address_;
  std::unique_ptr<Subprocess> service_;
  std::vector<std::unique_ptr<Subprocess>> daemons_;
  std::unique_ptr<v1::Jobs::Stub> jobs_;
};

TEST_F(DaemonE2eTest, TwoByTwoJobSucceeds) {
  const std::string job = Submit("ok", {}, 0);
  v1::JobStatus st = WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << DaemonOutput();
  EXPECT_EQ(st.world_size(), 4);
  EXPECT_EQ(st.restarts(), 0);
  // Each node ran two of the four ranks, and logged them per local rank.
  const std::string logs = Logs(job, 0);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("rank ", rank, "/4 ok restart=0")));
  }
}

TEST_F(DaemonE2eTest, SigkilledWorkerRestartsEveryNodeThenSucceeds) {
  const std::string job = Submit("kill", {"--fail-rank", "1", "--fail-mode", "sigkill"}, 1);
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
  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.", 4, kDeadline).ok()) << DaemonOutput();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::CancelJobRequest r;
  r.set_job_id(job);
  v1::JobStatus resp;
  ASSERT_TRUE(jobs_->Cancel(&ctx, r, &resp).ok());
  EXPECT_EQ(WaitFinished(job).state(), v1::JOB_STATE_CANCELLED);
  const std::string entry = "ELASTRUN_TEST_JOB=" + job_marker;
  EXPECT_TRUE(PollUntil([&] { return ProcessesWithEnv(entry).empty(); }))
      << "workers left behind" << DaemonOutput();
}

TEST_F(DaemonE2eTest, SigtermToDaemonStopsItsWorkersAndExits) {
  const std::string job_marker = absl::StrCat("term-", getpid(), "-", dir_);
  const std::string ready = testing::MakeTempDir("daemon_e2e_ready");
  Submit("hang", {"--hang", "--ready-dir", ready}, 0, job_marker);
  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.", 4, kDeadline).ok()) << DaemonOutput();
  for (auto& d : daemons_) d->Signal(SIGTERM);
  for (auto& d : daemons_) {
    ASSERT_TRUE(d->Wait(kDeadline).ok());
    EXPECT_EQ(d->exit_code(), 128 + SIGTERM) << d->Output();
  }
  // The daemons reaped their workers before exiting.
  EXPECT_THAT(ProcessesWithEnv("ELASTRUN_TEST_JOB=" + job_marker), IsEmpty());
}

TEST_F(DaemonE2eTest, ServiceSigkilledAndRestartedJobGoesOnWithoutRestart) {
  const std::string ready = testing::MakeTempDir("daemon_e2e_ready");
  // About 4 s of training, so the service is back before it ends.
  const std::string job =
      Submit("svc", {"--steps", "40", "--step-ms", "100", "--ready-dir", ready}, 0);
  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.", 4, kDeadline).ok()) << DaemonOutput();
  service_->Signal(SIGKILL);
  ASSERT_TRUE(service_->Wait(kDeadline).ok());
  ASSERT_NO_FATAL_FAILURE(StartService(address_));  // same port, same state
  v1::JobStatus st = WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << DaemonOutput();
  // The daemons re-registered within the lease with their running attempt:
  // no node was lost, no new round.
  EXPECT_EQ(st.round(), 0) << st.DebugString();
  EXPECT_EQ(st.restarts(), 0);
  EXPECT_EQ(st.history_size(), 1);
  EXPECT_EQ(AliveNodes(), 2);
}

TEST_F(DaemonE2eTest, DaemonSigkilledJobReformsOnSurvivors) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_TRUE(PollUntil([&] { return AliveNodes() == 3; }));
  const std::string ready = testing::MakeTempDir("daemon_e2e_ready");
  const std::string job = Submit(
      "lose", {"--steps", "30", "--step-ms", "50", "--ready-dir", ready}, 3, "", 2, 3);
  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.", 6, kDeadline).ok()) << DaemonOutput();
  // The daemon dies; its workers die with it (parent-death signal).
  daemons_[2]->Signal(SIGKILL);
  ASSERT_TRUE(daemons_[2]->Wait(kDeadline).ok());
  v1::JobStatus st = WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << DaemonOutput();
  EXPECT_GE(st.round(), 1);
  EXPECT_EQ(st.world_size(), 4);
  // Depending on whether the survivors' workers saw the broken collective
  // before the service saw the broken stream, round 0 ended as a node loss
  // or as a failure.
  EXPECT_THAT(st.history(0).end_reason(), ::testing::AnyOf("node lost", "failure"));
}

TEST_F(DaemonE2eTest, NodeJoiningMidJobScalesUp) {
  const std::string ready = testing::MakeTempDir("daemon_e2e_ready");
  const std::string job = Submit(
      "grow", {"--steps", "60", "--step-ms", "50", "--ready-dir", ready}, 0, "", 2, 3);
  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.", 4, kDeadline).ok()) << DaemonOutput();
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  v1::JobStatus st = WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << DaemonOutput();
  EXPECT_EQ(st.world_size(), 6);
  EXPECT_EQ(st.restarts(), 0);  // a membership change is not a restart
  EXPECT_EQ(st.history(0).end_reason(), "scale-up");
  const std::string logs = Logs(job, st.round());
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("rank ", rank, "/6 ok")));
  }
}

}  // namespace
}  // namespace elastrun
