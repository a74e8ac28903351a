// Reconciliation after a service restart, on the Coordinator with fake
// streams and a FakeClock: attempts of jobs the service does not know are
// stopped; a RUNNING job of the stored state learns from its round's
// daemons whether they still run it, and re-forms on those that do, or
// fails when none does (also when its daemon never comes back), freeing
// its nodes' slots.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_test_util.h"
#include "rendezvous/coordinator.h"
#include "tests/testing/subprocess.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::HasSubstr;

using coordinator_testing::JoinRequest;
using coordinator_testing::RecordingStream;
using coordinator_testing::RegisterRequest;
using coordinator_testing::TrainJob;

class CoordinatorReconcileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::MakeTempDir("coordinator_reconcile") + "/state.db";
    Start();
  }
  // (Re)starts the service on the same state file.
  void Start() {
    c_.reset();
    CoordinatorOptions o;
    o.clock = &clock_;
    o.state_path = path_;
    absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
    streams_.clear();
  }
  // Registers daemon "inc-1" of node `id` saying it runs `running`, and
  // opens its Watch stream.
  void Connect(const std::string& id,
               const std::vector<v1::RunningAttempt>& running = {}) {
    v1::RegisterNodeRequest r = RegisterRequest(id);
    for (const v1::RunningAttempt& a : running) *r.add_running() = a;
    streams_[id] = coordinator_testing::Connect(*c_, r);
  }
  std::string Submit(int min, int max) {
    return coordinator_testing::SubmitOk(*c_, TrainJob(min, max));
  }
  absl::Status Join(const std::string& job, const std::string& node, int64_t round) {
    return c_->JoinRound(JoinRequest(node, job, round)).status();
  }
  v1::JobStatus Get(const std::string& job) { return coordinator_testing::GetJob(*c_, job); }
  int FreeSlots(const std::string& node) {
    std::optional<v1::NodeInfo> n = coordinator_testing::FindNode(*c_, node);
    return n ? n->free_slots() : -1;
  }
  static v1::RunningAttempt Attempt(const std::string& job, int64_t round,
                                    bool ended = false) {
    v1::RunningAttempt a;
    a.set_job_id(job);
    a.set_round(round);
    a.set_ended(ended);
    return a;
  }
  // A job on `nodes` (MIN 1), its round 0 running on all of them.
  std::string RunningJob(const std::vector<std::string>& nodes) {
    for (const std::string& n : nodes) Connect(n);
    const std::string job = Submit(1, static_cast<int>(nodes.size()));
    for (const std::string& n : nodes) EXPECT_TRUE(Join(job, n, 0).ok());
    EXPECT_EQ(Get(job).state(), v1::JOB_STATE_RUNNING);
    return job;
  }

  FakeClock clock_;
  std::string path_;
  std::unique_ptr<Coordinator> c_;
  std::map<std::string, std::shared_ptr<RecordingStream>> streams_;
};

TEST_F(CoordinatorReconcileTest, AttemptsOfAJobTheServiceDoesNotKnowAreStopped) {
  // An empty state: the daemon says it runs a job of a lost state.
  Connect("n1", {Attempt("lost-7", 2)});
  std::optional<v1::EndJob> end = streams_["n1"]->EndJobOf("lost-7");
  ASSERT_TRUE(end.has_value());
  EXPECT_THAT(end->reason(), HasSubstr("does not know this job"));
  EXPECT_THAT(end->reason(), HasSubstr("cannot be adopted"));
  EXPECT_EQ(FreeSlots("n1"), 1);
}

TEST_F(CoordinatorReconcileTest, JobNoDaemonRunsAfterARestartFailsAndFreesItsNode) {
  const std::string job = RunningJob({"n1"});
  ASSERT_NO_FATAL_FAILURE(Start());
  // The daemon comes back, same incarnation, running nothing of it (its
  // workers ended while the service could not write the job's end).
  Connect("n1");
  const v1::JobStatus st = Get(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(st.finish_reason(),
              HasSubstr("no daemon runs job " + job + " after the service restarted"));
  EXPECT_EQ(FreeSlots("n1"), 1);
  // The node takes the next job.
  const std::string next = Submit(1, 1);
  EXPECT_TRUE(streams_["n1"]->AskedToJoin(next, 0));
  // And the failure is on disk.
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_FAILED);
}

TEST_F(CoordinatorReconcileTest, JobWhoseDaemonNeverComesBackFailsAfterTheLease) {
  const std::string job = RunningJob({"n1"});
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_RUNNING);  // its daemon may come back
  clock_.Advance(LeaseOptions().lease_timeout + absl::Seconds(1));
  c_->Tick();
  const v1::JobStatus st = Get(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(st.finish_reason(), HasSubstr("after the service restarted"));
}

TEST_F(CoordinatorReconcileTest, NodesThatLostTheRoundAreLostForTheJobWhichReforms) {
  const std::string job = RunningJob({"n1", "n2"});
  ASSERT_NO_FATAL_FAILURE(Start());
  Connect("n2");  // without it: waits for n1 before deciding
  EXPECT_EQ(Get(job).round(), 0);
  Connect("n1", {Attempt(job, 0)});
  const v1::JobStatus st = Get(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_RUNNING) << st.DebugString();
  EXPECT_EQ(st.round(), 1);
  ASSERT_EQ(st.history_size(), 2);
  EXPECT_EQ(st.history(0).end_reason(), "node lost");
  EXPECT_EQ(st.restarts(), 0);
  // Both are asked into round 1 (n2 is alive and free again).
  EXPECT_TRUE(streams_["n1"]->AskedToJoin(job, 1) || streams_["n2"]->AskedToJoin(job, 1));
}

TEST_F(CoordinatorReconcileTest, AnAttemptThatEndedWithItsReportQueuedStillCounts) {
  const std::string job = RunningJob({"n1"});
  ASSERT_NO_FATAL_FAILURE(Start());
  Connect("n1", {Attempt(job, 0, /*ended=*/true)});
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_RUNNING);
  ASSERT_TRUE(c_->ReportExit(coordinator_testing::ExitRequest("n1", job, 0, true)).ok());
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_SUCCEEDED);
}

}  // namespace
}  // namespace elastrun::rendezvous
