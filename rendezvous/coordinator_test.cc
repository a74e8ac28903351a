// The Coordinator without gRPC: fake Watch streams and a FakeClock. Covers
// when a re-formed round closes: at once when every node placed on the job
// joined it (nobody else can come), else after the last call; and one
// daemon per node id (a second one is refused while the first lives).
#include "rendezvous/coordinator.h"

#include <map>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_test_util.h"

namespace elastrun::rendezvous {
namespace {

using coordinator_testing::ExitRequest;
using coordinator_testing::JoinRequest;
using coordinator_testing::RecordingStream;
using coordinator_testing::RegisterRequest;
using coordinator_testing::TrainJob;

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.clock = &clock_;
    absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
  }
  // RegisterNode of daemon `incarnation` of node `id`.
  absl::Status Register(const std::string& id, const std::string& incarnation,
                        int slots = 1) {
    v1::RegisterNodeRequest r = RegisterRequest(id, slots, incarnation);
    r.set_addr(id + "." + incarnation + ".test");
    return c_->RegisterNode(r).status();
  }
  absl::Status Heartbeat(const std::string& id, const std::string& incarnation) {
    v1::HeartbeatRequest r;
    r.set_node_id(id);
    r.set_incarnation(incarnation);
    return c_->Heartbeat(r).status();
  }
  void AddNode(const std::string& id, int slots = 1) {
    ASSERT_TRUE(Register(id, "inc-1", slots).ok());
    auto s = std::make_shared<RecordingStream>();
    ASSERT_TRUE(coordinator_testing::Watch(*c_, id, s).ok());
    streams_[id] = s;
  }
  std::string Submit(int min, int max) {
    return coordinator_testing::SubmitOk(*c_, TrainJob(min, max, 1, /*max_restarts=*/1));
  }
  // A 1-node job of `nproc` workers; the service's answer.
  absl::StatusOr<v1::SubmitResponse> TrySubmit(const std::string& name, int nproc,
                                               bool wait_for_nodes, int min_nodes = 1) {
    v1::SubmitRequest r = TrainJob(min_nodes, min_nodes, nproc);
    r.mutable_spec()->set_name(name);
    r.mutable_spec()->set_wait_for_nodes(wait_for_nodes);
    return c_->Submit(r);
  }
  std::string SubmitOk(const std::string& name, int nproc, bool wait_for_nodes = false) {
    absl::StatusOr<v1::SubmitResponse> resp = TrySubmit(name, nproc, wait_for_nodes);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->job_id() : "";
  }
  void Join(const std::string& id, const std::string& job, int64_t round,
            int local_world_size = 1) {
    absl::StatusOr<v1::JoinRoundResponse> resp =
        c_->JoinRound(JoinRequest(id, job, round, local_world_size));
    EXPECT_TRUE(resp.ok()) << id << ": " << resp.status();
  }
  void Lose(const std::string& id) { c_->DetachWatch(id, streams_.at(id).get()); }
  void Fail(const std::string& id, const std::string& job, int64_t round) {
    ASSERT_TRUE(c_->ReportExit(ExitRequest(id, job, round, false)).ok());
  }
  void Succeed(const std::string& id, const std::string& job, int64_t round) {
    ASSERT_TRUE(c_->ReportExit(ExitRequest(id, job, round, true)).ok());
  }
  bool Asked(const std::string& id, const std::string& job) {
    return streams_.at(id)->AskedToJoin(job);
  }
  int64_t Started(const std::string& id) { return streams_.at(id)->StartedRound(); }
  v1::JobStatus Get(const std::string& job) { return coordinator_testing::GetJob(*c_, job); }

  FakeClock clock_;
  std::unique_ptr<Coordinator> c_;
  std::map<std::string, std::shared_ptr<RecordingStream>> streams_;
};

TEST_F(CoordinatorTest, ReformedRoundClosesAtOnceWhenEveryPlacedNodeJoined) {
  for (const char* id : {"a", "b", "c"}) AddNode(id);
  const std::string job = Submit(2, 3);
  for (const char* id : {"a", "b", "c"}) Join(id, job, 0);
  ASSERT_EQ(Started("a"), 0);
  clock_.Advance(absl::Milliseconds(500));
  Lose("c");  // node loss: round 1 opens for a and b
  Join("a", job, 1);
  EXPECT_EQ(Started("a"), 0);  // b may still come
  Join("b", job, 1);
  // Nobody else is placed: no last call to wait out (the clock did not move).
  EXPECT_EQ(Started("a"), 1);
  EXPECT_EQ(Started("b"), 1);
  EXPECT_EQ(streams_.at("a")->StartedWorldSize(), 2);
  v1::JobStatus st = Get(job);
  ASSERT_EQ(st.history_size(), 2);
  EXPECT_EQ(st.history(1).closed_time().seconds(), absl::ToUnixSeconds(clock_.Now()));
  EXPECT_EQ(st.phase(), v1::ROUND_PHASE_RUNNING);
}

TEST_F(CoordinatorTest, FirstRoundStillWaitsForTheLastCall) {
  // Round 0 keeps its last call: daemons may still be registering.
  for (const char* id : {"a", "b"}) AddNode(id);
  const std::string job = Submit(2, 3);
  Join("a", job, 0);
  Join("b", job, 0);
  EXPECT_EQ(Started("a"), -1);
  clock_.Advance(absl::Seconds(1));
  c_->Tick();
  EXPECT_EQ(Started("a"), 0);
  EXPECT_EQ(Started("b"), 0);
}

TEST_F(CoordinatorTest, ReformedRoundWaitsWhileAPlacedNodeHasNotJoined) {
  for (const char* id : {"a", "b", "c"}) AddNode(id);
  const std::string job = Submit(2, 3);
  for (const char* id : {"a", "b", "c"}) Join(id, job, 0);
  Fail("a", job, 0);  // restart: round 1 for all three
  Join("a", job, 1);
  Join("b", job, 1);
  EXPECT_EQ(Started("a"), 0);  // c is alive and placed: it may still join
  clock_.Advance(absl::Seconds(1));
  c_->Tick();
  EXPECT_EQ(Started("a"), 1);  // the last call closed it with a and b
  EXPECT_EQ(streams_.at("a")->StartedWorldSize(), 2);
}

TEST_F(CoordinatorTest, LosingTheOnlyMissingNodeClosesTheRoundAtOnce) {
  for (const char* id : {"a", "b", "c"}) AddNode(id);
  const std::string job = Submit(2, 3);
  for (const char* id : {"a", "b", "c"}) Join(id, job, 0);
  Fail("a", job, 0);
  Join("a", job, 1);
  Join("b", job, 1);
  EXPECT_EQ(Started("b"), 0);
  Lose("c");  // the one that could still come is gone
  EXPECT_EQ(Started("a"), 1);
  EXPECT_EQ(Started("b"), 1);
  EXPECT_EQ(streams_.at("b")->StartedWorldSize(), 2);
}

// The node `id` as ListNodes shows it.
v1::NodeInfo NodeInfoOf(Coordinator& c, const std::string& id) {
  std::optional<v1::NodeInfo> node = coordinator_testing::FindNode(c, id);
  EXPECT_TRUE(node.has_value()) << "no node " << id;
  return node.value_or(v1::NodeInfo());
}

TEST_F(CoordinatorTest, JobsShareANodeByFreeSlots) {
  AddNode("a", /*slots=*/2);
  const std::string j1 = Submit(1, 1);
  const std::string j2 = Submit(1, 1);
  const std::string j3 = Submit(1, 1);
  ASSERT_TRUE(streams_.at("a")->AskedToJoin(j1));
  ASSERT_TRUE(streams_.at("a")->AskedToJoin(j2));
  EXPECT_FALSE(streams_.at("a")->AskedToJoin(j3));  // no slot left
  Join("a", j1, 0);
  Join("a", j2, 0);
  // nnodes 1:1 closes at max: no last call.
  EXPECT_EQ(Get(j1).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(j2).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(streams_.at("a")->StartedRound(j1), 0);
  EXPECT_EQ(streams_.at("a")->StartedRound(j2), 0);
  EXPECT_EQ(Get(j3).state(), v1::JOB_STATE_PENDING);
  v1::NodeInfo info = NodeInfoOf(*c_, "a");
  EXPECT_EQ(info.free_slots(), 0);
  EXPECT_THAT(info.jobs(), ::testing::UnorderedElementsAre(j1, j2));

  v1::CancelJobRequest cancel;
  cancel.set_job_id(j1);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());
  EXPECT_EQ(Get(j1).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Get(j2).state(), v1::JOB_STATE_RUNNING);  // untouched
  ASSERT_TRUE(streams_.at("a")->AskedToJoin(j3));     // j1's slot went to j3
  Join("a", j3, 0);
  EXPECT_EQ(Get(j3).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(streams_.at("a")->StartedRound(j3), 0);
  info = NodeInfoOf(*c_, "a");
  EXPECT_EQ(info.free_slots(), 0);
  EXPECT_THAT(info.jobs(), ::testing::UnorderedElementsAre(j2, j3));
}

TEST_F(CoordinatorTest, ABigJobWaitsForFreeSlotsAndQueuedJobsKeepTheirOrder) {
  AddNode("a", /*slots=*/4);
  const std::string small = Submit(1, 1);  // 1 slot
  absl::StatusOr<v1::SubmitResponse> big = TrySubmit("big", 4, /*wait_for_nodes=*/false);
  ASSERT_TRUE(big.ok()) << big.status();
  const std::string after = Submit(1, 1);
  EXPECT_FALSE(streams_.at("a")->AskedToJoin(big->job_id()));  // 3 of 4 slots free
  // The big job holds a's slots: the 1-slot job behind it does not overtake
  // it there (it would, again and again, as a stream of small jobs).
  EXPECT_FALSE(streams_.at("a")->AskedToJoin(after));
  EXPECT_EQ(NodeInfoOf(*c_, "a").free_slots(), 3);
  Join("a", small, 0);
  Succeed("a", small, 0);
  EXPECT_EQ(Get(small).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_TRUE(streams_.at("a")->AskedToJoin(big->job_id()));
  EXPECT_FALSE(streams_.at("a")->AskedToJoin(after));
  EXPECT_EQ(NodeInfoOf(*c_, "a").free_slots(), 0);
}

TEST_F(CoordinatorTest, AJobNoNodeCouldHoldIsRefusedAndNothingIsStored) {
  AddNode("node-b", 1);
  AddNode("node-a", 1);
  absl::StatusOr<v1::SubmitResponse> r = TrySubmit("big", 2, false, /*min_nodes=*/2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_EQ(r.status().message(),
            "job needs 2 node(s) with 2 slots each; registered: node-a (1 slot), node-b "
            "(1 slot); submit with --wait-for-nodes (wait_for_nodes: true in a job file) "
            "to wait for such nodes");
  EXPECT_EQ(c_->ListJobs(v1::ListJobsRequest())->jobs_size(), 0);
  // A node whose slots are taken counts (the job fits once they free up);
  // a lost one does not.
  AddNode("busy", 2);
  const std::string running = SubmitOk("running", 2);
  ASSERT_TRUE(Asked("busy", running));
  const std::string queued = SubmitOk("queued", 2);
  EXPECT_EQ(Get(queued).state(), v1::JOB_STATE_PENDING);
  Lose("busy");
  r = TrySubmit("late", 2, false);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_THAT(r.status().message(),
              ::testing::HasSubstr("registered: node-a (1 slot), node-b (1 slot);"));
  EXPECT_EQ(c_->ListJobs(v1::ListJobsRequest())->jobs_size(), 2);
}

TEST_F(CoordinatorTest, APoolsJobRunsOnItsNodesAloneAndTheyTakeNoOther) {
  AddNode("daemon", 2);  // the default pool
  auto add_pooled = [&](const std::string& id) {
    v1::RegisterNodeRequest r = RegisterRequest(id, 4, "inc-1");
    r.set_pool("run.mn1");
    ASSERT_TRUE(c_->RegisterNode(r).ok());
    auto s = std::make_shared<RecordingStream>();
    ASSERT_TRUE(coordinator_testing::Watch(*c_, id, s).ok());
    streams_[id] = s;
  };
  ASSERT_NO_FATAL_FAILURE(add_pooled("p1"));
  // A job of the default pool goes to the daemon's node, not to the pool's
  // with more free slots.
  const std::string other = SubmitOk("other", 2);
  EXPECT_TRUE(Asked("daemon", other));
  EXPECT_FALSE(Asked("p1", other));
  // No node of its pool: refused unless it waits, and the pool is named.
  v1::SubmitRequest run = TrainJob(1, 2, 2);
  run.mutable_spec()->set_pool("run.mn2");
  absl::StatusOr<v1::SubmitResponse> refused = c_->Submit(run);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      refused.status().message(),
      ::testing::HasSubstr("job needs 1 node(s) with 2 slots each in pool run.mn2; "
                           "registered there: none alive"));
  // Its own pool's nodes alone, never the default pool's free slots.
  run.mutable_spec()->set_pool("run.mn1");
  run.mutable_spec()->set_nproc_per_node(1);
  const std::string job = coordinator_testing::SubmitOk(*c_, run);
  EXPECT_TRUE(Asked("p1", job));
  ASSERT_NO_FATAL_FAILURE(add_pooled("p2"));
  EXPECT_TRUE(Asked("p2", job));  // grown to its max within the pool
  EXPECT_FALSE(Asked("daemon", job));
  std::optional<v1::NodeInfo> p1 = coordinator_testing::FindNode(*c_, "p1");
  ASSERT_TRUE(p1.has_value());
  EXPECT_EQ(p1->pool(), "run.mn1");
  EXPECT_EQ(coordinator_testing::FindNode(*c_, "daemon")->pool(), "");
}

TEST_F(CoordinatorTest, AJobWaitingForNodesIsPlacedOnceABigEnoughNodeRegisters) {
  AddNode("small", 1);
  const std::string job = SubmitOk("big", 2, /*wait_for_nodes=*/true);
  v1::JobStatus st = Get(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(st.phase(), v1::ROUND_PHASE_QUEUED);
  EXPECT_EQ(st.pending_reason(),
            "waiting for nodes: job needs 1 node(s) with 2 slots each; registered: small "
            "(1 slot)");
  EXPECT_FALSE(Asked("small", job));
  AddNode("large", 2);
  ASSERT_TRUE(Asked("large", job));
  Join("large", job, 0, /*local_world_size=*/2);
  st = Get(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(st.pending_reason(), "");
  EXPECT_EQ(streams_.at("large")->StartedRound(job), 0);
}

TEST_F(CoordinatorTest, AJobWaitingForNodesDoesNotBlockTheJobsBehindIt) {
  AddNode("a", 1);
  const std::string big = SubmitOk("big", 2, /*wait_for_nodes=*/true);
  const std::string small = SubmitOk("small", 1);
  ASSERT_TRUE(Asked("a", small));
  Join("a", small, 0);
  EXPECT_EQ(Get(small).state(), v1::JOB_STATE_RUNNING);
  Succeed("a", small, 0);
  EXPECT_EQ(Get(small).state(), v1::JOB_STATE_SUCCEEDED);
  // And the next one too, once the slot is free again.
  const std::string next = SubmitOk("next", 1);
  EXPECT_TRUE(Asked("a", next));
  EXPECT_EQ(Get(big).state(), v1::JOB_STATE_PENDING);
  EXPECT_FALSE(Asked("a", big));
}

TEST_F(CoordinatorTest, AJobWaitingForSlotsHoldsThemWhileOthersBackfillElsewhere) {
  AddNode("a", 4);
  AddNode("b", 1);
  const std::string first = SubmitOk("first", 1);  // on a: the most free slots
  ASSERT_TRUE(Asked("a", first));
  const std::string big = SubmitOk("big", 4);  // a has 3 free: it waits, holding a
  EXPECT_FALSE(Asked("a", big));
  EXPECT_EQ(Get(big).pending_reason(),
            "waiting for free slots: needs 1 node(s) with 4 free slot(s) each (held for "
            "it as other jobs end)");
  const std::string second = SubmitOk("second", 1);  // backfills onto b, not a
  EXPECT_TRUE(Asked("b", second));
  EXPECT_FALSE(Asked("a", second));
  const std::string third = SubmitOk("third", 1);  // no free slot that is not held
  EXPECT_FALSE(Asked("a", third));
  EXPECT_FALSE(Asked("b", third));
  // Another 4-slot job finds a held already: it waits behind the first.
  const std::string big2 = SubmitOk("big2", 4);
  EXPECT_EQ(Get(big2).pending_reason(),
            "waiting for free slots: needs 1 node(s) with 4 free slot(s) each, behind "
            "earlier queued jobs");
  Join("a", first, 0);
  Succeed("a", first, 0);
  EXPECT_TRUE(Asked("a", big));  // a's slots went to the job that held them
  EXPECT_FALSE(Asked("a", third));
  Join("b", second, 0);
  Succeed("b", second, 0);
  EXPECT_TRUE(Asked("b", third));
}

TEST_F(CoordinatorTest, ProgressIsVisibleAtOnceButWritesNoJobRecord) {
  AddNode("a");
  const std::string job = Submit(1, 1);
  Join("a", job, 0);
  clock_.Advance(absl::Seconds(1));
  c_->Tick();
  ASSERT_EQ(Started("a"), 0);
  const Store::Writes before = c_->store_writes();
  const absl::Time first = clock_.Now();
  for (int step = 1; step <= 50; ++step) {
    v1::ReportProgressRequest r;
    r.set_job_id(job);
    r.mutable_progress()->set_node_id("a");
    r.mutable_progress()->set_step(step);
    ASSERT_TRUE(c_->ReportProgress(r).ok());
    clock_.Advance(absl::Milliseconds(10));
  }
  EXPECT_EQ(Get(job).last_progress().step(), 50);   // in memory at once
  EXPECT_EQ(c_->store_writes().jobs, before.jobs);  // the job record is not rewritten
  EXPECT_EQ(c_->store_writes().progress, before.progress + 1);  // one small row
  // The newest report is written by the timer once the interval (2 s by
  // default) since the first one is over; the node keeps its lease.
  v1::HeartbeatRequest hb;
  hb.set_node_id("a");
  hb.set_incarnation("inc-1");
  ASSERT_TRUE(c_->Heartbeat(hb).ok());
  std::optional<absl::Time> next = c_->Tick();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, first + absl::Seconds(2));
  clock_.Advance(*next - clock_.Now());
  c_->Tick();
  EXPECT_EQ(c_->store_writes().progress, before.progress + 2);
  EXPECT_EQ(c_->store_writes().jobs, before.jobs);
}

TEST_F(CoordinatorTest, ProgressOfAnUnknownJobIsNotFound) {
  v1::ReportProgressRequest r;
  r.set_job_id("nope-1");
  EXPECT_EQ(c_->ReportProgress(r).code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, SecondDaemonOfANodeIsRefusedWhileTheFirstHoldsItsLease) {
  AddNode("a");
  const std::string job = Submit(1, 1);
  Join("a", job, 0);
  clock_.Advance(absl::Seconds(1));  // round 0's last call
  c_->Tick();
  ASSERT_EQ(Started("a"), 0);
  ASSERT_TRUE(Heartbeat("a", "inc-1").ok());

  absl::Status refused = Register("a", "inc-2");
  EXPECT_EQ(refused.code(), absl::StatusCode::kAlreadyExists) << refused;
  EXPECT_THAT(std::string(refused.message()),
              ::testing::HasSubstr("node \"a\" is held by another daemon at a.inc-1.test "
                                   "(incarnation inc-1) whose lease expires in 3s"));
  // The holder keeps the node, its stream and its job.
  EXPECT_TRUE(Heartbeat("a", "inc-1").ok());
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Get(job).history_size(), 1);
  v1::ListNodesResponse nodes = c_->ListNodes().value();
  ASSERT_EQ(nodes.nodes_size(), 1);
  EXPECT_EQ(nodes.nodes(0).addr(), "a.inc-1.test");
  EXPECT_TRUE(nodes.nodes(0).watching());

  // The same daemon re-registering (a network blip) is a reconnect.
  ASSERT_TRUE(Register("a", "inc-1").ok());
  EXPECT_EQ(Get(job).history_size(), 1);
  // Heartbeats keep the lease: still refused 2.5 s later.
  clock_.Advance(absl::Milliseconds(2500));
  ASSERT_TRUE(Heartbeat("a", "inc-1").ok());
  clock_.Advance(absl::Milliseconds(2500));
  EXPECT_EQ(Register("a", "inc-2").code(), absl::StatusCode::kAlreadyExists);

  // The first daemon goes silent: once its lease ran out, the second takes
  // the node (no timer has run yet) and the first is shut out.
  clock_.Advance(absl::Milliseconds(500));
  ASSERT_TRUE(Register("a", "inc-2").ok());
  EXPECT_EQ(Heartbeat("a", "inc-1").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Register("a", "inc-1").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(c_->ListNodes()->nodes(0).addr(), "a.inc-2.test");
}

TEST_F(CoordinatorTest, CrashedDaemonsSuccessorIsAcceptedAtOnceWhenItsStreamBreaks) {
  AddNode("a");
  EXPECT_EQ(Register("a", "inc-2").code(), absl::StatusCode::kAlreadyExists);
  Lose("a");  // the first daemon died: its Watch stream broke
  // No time passed: no lease to wait out.
  ASSERT_TRUE(Register("a", "inc-2").ok());
  EXPECT_TRUE(Heartbeat("a", "inc-2").ok());
  v1::ListNodesResponse nodes = c_->ListNodes().value();
  ASSERT_EQ(nodes.nodes_size(), 1);
  EXPECT_EQ(nodes.nodes(0).state(), v1::NODE_STATE_ALIVE);
  EXPECT_EQ(nodes.nodes(0).addr(), "a.inc-2.test");
}

}  // namespace
}  // namespace elastrun::rendezvous
