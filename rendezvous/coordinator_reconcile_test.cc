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
#include "rendezvous/coordinator.h"
#include "tests/testing/subprocess.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::HasSubstr;

class RecordingStream : public NodeStream {
 public:
  void Send(v1::Command command) override {
    absl::MutexLock lock(&mu_);
    commands_.push_back(std::move(command));
  }
  void Close(absl::Status) override {}
  std::vector<v1::Command> commands() {
    absl::MutexLock lock(&mu_);
    return commands_;
  }
  // The EndJob command for `job`, if one came.
  std::optional<v1::EndJob> EndJobOf(const std::string& job) {
    for (const v1::Command& c : commands()) {
      if (c.has_end_job() && c.end_job().job_id() == job) return c.end_job();
    }
    return std::nullopt;
  }
  bool AskedToJoin(const std::string& job, int64_t round) {
    for (const v1::Command& c : commands()) {
      if (c.has_join_round() && c.join_round().job_id() == job &&
          c.join_round().round() == round) {
        return true;
      }
    }
    return false;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::Command> commands_ ABSL_GUARDED_BY(mu_);
};

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
    v1::RegisterNodeRequest r;
    r.set_node_id(id);
    r.set_incarnation("inc-1");
    r.set_addr("127.0.0.1");
    r.set_slots(1);
    for (const v1::RunningAttempt& a : running) *r.add_running() = a;
    ASSERT_TRUE(c_->RegisterNode(r).ok());
    v1::WatchRequest w;
    w.set_node_id(id);
    w.set_incarnation("inc-1");
    auto s = std::make_shared<RecordingStream>();
    ASSERT_TRUE(c_->AttachWatch(w, s).ok());
    streams_[id] = s;
  }
  std::string Submit(int min, int max) {
    v1::SubmitRequest r;
    r.mutable_spec()->set_name("train");
    r.mutable_spec()->set_min_nodes(min);
    r.mutable_spec()->set_max_nodes(max);
    r.mutable_spec()->set_nproc_per_node(1);
    r.mutable_spec()->add_argv("worker");
    absl::StatusOr<v1::SubmitResponse> resp = c_->Submit(r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->job_id() : "";
  }
  absl::Status Join(const std::string& job, const std::string& node, int64_t round) {
    v1::JoinRoundRequest r;
    r.set_job_id(job);
    r.set_round(round);
    r.set_node_id(node);
    r.set_master_port(29500);
    r.set_local_world_size(1);
    return c_->JoinRound(r).status();
  }
  v1::JobStatus Get(const std::string& job) {
    v1::GetJobRequest r;
    r.set_job_id(job);
    absl::StatusOr<v1::JobStatus> s = c_->GetJob(r);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::JobStatus();
  }
  int FreeSlots(const std::string& node) {
    const v1::ListNodesResponse nodes = *c_->ListNodes();
    for (const v1::NodeInfo& n : nodes.nodes()) {
      if (n.node_id() == node) return n.free_slots();
    }
    return -1;
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
  v1::ReportExitRequest done;
  done.set_job_id(job);
  done.set_round(0);
  done.set_node_id("n1");
  done.set_succeeded(true);
  ASSERT_TRUE(c_->ReportExit(done).ok());
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_SUCCEEDED);
}

}  // namespace
}  // namespace elastrun::rendezvous
