// The Coordinator's node administration without gRPC: lost nodes expire
// after --node-expiry (not before), drain keeps new jobs off a node while
// its running job goes on, remove forgets a node (refused while a job holds
// it, unless forced), and list calls come in pages. Fake streams and a
// FakeClock.
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_test_util.h"
#include "rendezvous/codec.h"
#include "rendezvous/coordinator.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::HasSubstr;

using coordinator_testing::JoinRequest;
using coordinator_testing::RecordingStream;
using coordinator_testing::RegisterRequest;
using coordinator_testing::TrainJob;

constexpr absl::Duration kLease = absl::Seconds(3);
constexpr absl::Duration kExpiry = absl::Minutes(10);

class CoordinatorNodesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.clock = &clock_;
    o.lease.lease_timeout = kLease;
    o.lease.node_expiry = kExpiry;
    absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
  }
  absl::Status Register(const std::string& id, int slots = 1,
                        const std::string& incarnation = "inc-1") {
    return c_->RegisterNode(RegisterRequest(id, slots, incarnation)).status();
  }
  void AddNode(const std::string& id, int slots = 1) {
    ASSERT_TRUE(Register(id, slots).ok());
    auto s = std::make_shared<RecordingStream>();
    ASSERT_TRUE(coordinator_testing::Watch(*c_, id, s).ok());
    streams_[id] = s;
  }
  absl::Status Heartbeat(const std::string& id) {
    v1::HeartbeatRequest r;
    r.set_node_id(id);
    r.set_incarnation("inc-1");
    return c_->Heartbeat(r).status();
  }
  std::string Submit(int nnodes, bool wait_for_nodes = false) {
    v1::SubmitRequest r = TrainJob(nnodes, nnodes);
    r.mutable_spec()->set_wait_for_nodes(wait_for_nodes);
    return coordinator_testing::SubmitOk(*c_, r);
  }
  void Join(const std::string& id, const std::string& job, int64_t round) {
    absl::StatusOr<v1::JoinRoundResponse> resp = c_->JoinRound(JoinRequest(id, job, round));
    ASSERT_TRUE(resp.ok()) << id << ": " << resp.status();
  }
  v1::JobStatus Get(const std::string& job) { return coordinator_testing::GetJob(*c_, job); }
  absl::StatusOr<v1::NodeInfo> Drain(const std::string& id, bool undo = false) {
    v1::NodeRequest r;
    r.set_node_id(id);
    r.set_undo(undo);
    return c_->DrainNode(r);
  }
  absl::StatusOr<v1::NodeInfo> Remove(const std::string& id, bool force = false) {
    v1::NodeRequest r;
    r.set_node_id(id);
    r.set_force(force);
    return c_->RemoveNode(r);
  }
  // Every node id, by listing all pages of `page_size`.
  std::vector<std::string> ListAll(int page_size, int* pages = nullptr) {
    std::vector<std::string> ids;
    v1::ListNodesRequest r;
    r.set_page_size(page_size);
    for (int n = 1;; ++n) {
      absl::StatusOr<v1::ListNodesResponse> page = c_->ListNodes(r);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) return ids;
      for (const v1::NodeInfo& info : page->nodes()) ids.push_back(info.node_id());
      if (page->next_page_token().empty()) {
        if (pages != nullptr) *pages = n;
        return ids;
      }
      r.set_page_token(page->next_page_token());
    }
  }
  std::optional<v1::NodeInfo> Node(const std::string& id) {
    return coordinator_testing::FindNode(*c_, id);
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> c_;
  std::map<std::string, std::shared_ptr<RecordingStream>> streams_;
};

TEST_F(CoordinatorNodesTest, ALostNodeIsForgottenExactlyAfterTheExpiry) {
  AddNode("a");
  AddNode("b");
  clock_.Advance(kLease - absl::Seconds(1));
  ASSERT_TRUE(Heartbeat("b").ok());
  clock_.Advance(absl::Seconds(1));
  c_->Tick();  // a's lease ran out
  ASSERT_EQ(Node("a")->state(), v1::NODE_STATE_LOST);
  const absl::Time lost = clock_.Now();

  clock_.Advance(kExpiry - absl::Milliseconds(1));
  ASSERT_TRUE(Heartbeat("b").ok());  // b stays alive throughout
  std::optional<absl::Time> next = c_->Tick();
  ASSERT_TRUE(Node("a").has_value()) << "forgotten before the expiry";
  EXPECT_EQ(next, lost + kExpiry);  // the timer wakes for it
  EXPECT_EQ(c_->store_writes().node_deletes, 0);

  clock_.Advance(absl::Milliseconds(1));
  c_->Tick();
  EXPECT_FALSE(Node("a").has_value());
  EXPECT_TRUE(Node("b").has_value());  // alive nodes never expire
  EXPECT_EQ(c_->store_writes().node_deletes, 1);
  // The node's daemon comes back: a fresh node.
  EXPECT_TRUE(absl::IsNotFound(Heartbeat("a")));
  ASSERT_TRUE(Register("a").ok());
  EXPECT_EQ(FromProto(Node("a")->registered_time()), clock_.Now());
}

TEST_F(CoordinatorNodesTest, ADrainedNodeGetsNoNewJobWhileItsRunningJobGoesOn) {
  AddNode("a");
  AddNode("b");
  const std::string running = Submit(1);
  const std::string on = streams_.at("a")->AskedToJoin(running) ? "a" : "b";
  const std::string other = on == "a" ? "b" : "a";
  Join(on, running, 0);
  ASSERT_EQ(Get(running).state(), v1::JOB_STATE_RUNNING);

  absl::StatusOr<v1::NodeInfo> drained = Drain(on);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_TRUE(drained->draining());
  EXPECT_THAT(drained->jobs(), ::testing::ElementsAre(running));
  ASSERT_TRUE(Drain(other).ok());
  // Both drained: a new job waits although `other` is free.
  const std::string queued = Submit(1, /*wait_for_nodes=*/true);
  EXPECT_EQ(Get(queued).phase(), v1::ROUND_PHASE_QUEUED);
  EXPECT_THAT(Get(queued).pending_reason(), HasSubstr("2 draining"));
  EXPECT_FALSE(streams_.at(other)->AskedToJoin(queued));
  // The running job was not disturbed.
  EXPECT_EQ(Get(running).state(), v1::JOB_STATE_RUNNING);
  EXPECT_FALSE(streams_.at(on)->Stopped(running));
  EXPECT_TRUE(Node(on)->draining());

  // Undrained: the queued job is placed there at once.
  absl::StatusOr<v1::NodeInfo> undone = Drain(other, /*undo=*/true);
  ASSERT_TRUE(undone.ok()) << undone.status();
  EXPECT_FALSE(undone->draining());
  EXPECT_TRUE(streams_.at(other)->AskedToJoin(queued));
  EXPECT_TRUE(absl::IsNotFound(Drain("nope").status()));
}

TEST_F(CoordinatorNodesTest, RemoveIsRefusedWhileAJobHoldsTheNodeUnlessForced) {
  AddNode("a");
  AddNode("b");
  const std::string job = Submit(2);
  Join("a", job, 0);
  Join("b", job, 0);
  clock_.Advance(absl::Seconds(2));
  c_->Tick();  // the last call
  ASSERT_EQ(Get(job).state(), v1::JOB_STATE_RUNNING);

  absl::StatusOr<v1::NodeInfo> refused = Remove("a");
  ASSERT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(job));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--force"));
  EXPECT_TRUE(Node("a").has_value());
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_RUNNING);

  absl::StatusOr<v1::NodeInfo> forced = Remove("a", /*force=*/true);
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_EQ(forced->node_id(), "a");
  EXPECT_FALSE(Node("a").has_value());
  // Lost for the job: its round ended and it re-forms without a.
  const v1::JobStatus st = Get(job);
  ASSERT_GE(st.history_size(), 1);
  EXPECT_EQ(st.history(0).end_reason(), "node lost");
  EXPECT_TRUE(streams_.at("b")->Stopped(job));
  // Its daemon is told the node is unknown, and may register afresh.
  ASSERT_TRUE(streams_.at("a")->closed().has_value());
  EXPECT_TRUE(absl::IsNotFound(*streams_.at("a")->closed()));
  EXPECT_TRUE(absl::IsNotFound(Heartbeat("a")));
  EXPECT_TRUE(absl::IsNotFound(Remove("a").status()));
}

TEST_F(CoordinatorNodesTest, AnIdleNodeIsRemovedAndComesBackFreshAndUndrained) {
  AddNode("a");
  ASSERT_TRUE(Drain("a").ok());
  absl::StatusOr<v1::NodeInfo> removed = Remove("a");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(removed->draining());  // as it was
  EXPECT_FALSE(Node("a").has_value());
  EXPECT_EQ(c_->store_writes().node_deletes, 1);
  EXPECT_TRUE(absl::IsNotFound(Heartbeat("a")));
  ASSERT_TRUE(Register("a").ok());
  EXPECT_FALSE(Node("a")->draining());
  EXPECT_EQ(Node("a")->state(), v1::NODE_STATE_ALIVE);
}

TEST_F(CoordinatorNodesTest, NodesAreListedInPagesEachNodeOnce) {
  for (int i = 0; i < 2500; ++i) ASSERT_TRUE(Register(absl::StrCat("n", 10000 + i)).ok());
  int pages = 0;
  std::vector<std::string> ids = ListAll(/*page_size=*/0, &pages);
  EXPECT_EQ(pages, 5);  // the default page: 500
  EXPECT_EQ(ids.size(), 2500u);
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 2500u);
  ids = ListAll(/*page_size=*/1 << 20, &pages);
  EXPECT_EQ(pages, 3);  // clamped to 1000
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));

  // Registrations between pages: each listed node once, none skipped.
  v1::ListNodesRequest r;
  r.set_page_size(1000);
  absl::StatusOr<v1::ListNodesResponse> first = c_->ListNodes(r);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(Register("a-before-the-token").ok());
  ASSERT_TRUE(Register("z-after-the-token").ok());
  r.set_page_token(first->next_page_token());
  std::set<std::string> seen;
  for (const auto& n : first->nodes()) seen.insert(n.node_id());
  for (;;) {
    absl::StatusOr<v1::ListNodesResponse> page = c_->ListNodes(r);
    ASSERT_TRUE(page.ok());
    for (const auto& n : page->nodes()) EXPECT_TRUE(seen.insert(n.node_id()).second);
    if (page->next_page_token().empty()) break;
    r.set_page_token(page->next_page_token());
  }
  EXPECT_EQ(seen.size(), 2501u);
  EXPECT_TRUE(seen.count("z-after-the-token"));

  r.set_page_size(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(c_->ListNodes(r).status()));
}

TEST_F(CoordinatorNodesTest, JobsAreListedInPagesOldestFirst) {
  for (int i = 0; i < 7; ++i) Submit(1, /*wait_for_nodes=*/true);
  v1::ListJobsRequest r;
  r.set_page_size(3);
  std::vector<std::string> ids;
  std::vector<int> sizes;
  for (;;) {
    absl::StatusOr<v1::ListJobsResponse> page = c_->ListJobs(r);
    ASSERT_TRUE(page.ok()) << page.status();
    sizes.push_back(page->jobs_size());
    for (const auto& j : page->jobs()) ids.push_back(j.job_id());
    if (page->next_page_token().empty()) break;
    r.set_page_token(page->next_page_token());
    if (sizes.size() == 1) Submit(1, /*wait_for_nodes=*/true);  // lands on a later page
  }
  EXPECT_THAT(sizes, ::testing::ElementsAre(3, 3, 2));
  EXPECT_EQ(ids.front(), "train-1");
  EXPECT_EQ(ids.back(), "train-8");
  r.set_page_token("not-a-token");
  absl::StatusOr<v1::ListJobsResponse> bad = c_->ListJobs(r);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  // A state filter pages too.
  v1::ListJobsRequest running;
  running.add_states(v1::JOB_STATE_RUNNING);
  EXPECT_EQ(c_->ListJobs(running)->jobs_size(), 0);
}

TEST(CoordinatorNodesLimitTest, ANewNodeBeyondMaxNodesTakesTheLongestLostsPlace) {
  FakeClock clock;
  CoordinatorOptions o;
  o.clock = &clock;
  o.max_nodes = 3;
  std::unique_ptr<Coordinator> c = Coordinator::Create(o).value();
  auto reg = [&](const std::string& id) {
    return c->RegisterNode(RegisterRequest(id, 1, "inc")).status();
  };
  auto ids = [&] {
    std::set<std::string> out;
    const v1::ListNodesResponse all = c->ListNodes().value();
    for (const v1::NodeInfo& n : all.nodes()) out.insert(n.node_id());
    return out;
  };
  auto heartbeat = [&](const std::string& id) {
    v1::HeartbeatRequest r;
    r.set_node_id(id);
    r.set_incarnation("inc");
    return c->Heartbeat(r).status();
  };
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(reg(id).ok());
  absl::Status full = reg("d");
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_THAT(std::string(full.message()), HasSubstr("--max-nodes"));
  EXPECT_TRUE(reg("a").ok());  // a known node still registers
  // b is lost first, then c: d takes b's place, then e takes c's.
  clock.Advance(absl::Seconds(2));
  ASSERT_TRUE(heartbeat("a").ok());
  ASSERT_TRUE(heartbeat("c").ok());
  clock.Advance(absl::Seconds(1));
  c->Tick();
  clock.Advance(absl::Seconds(2));
  ASSERT_TRUE(heartbeat("a").ok());
  c->Tick();
  ASSERT_TRUE(reg("d").ok());
  EXPECT_EQ(ids(), (std::set<std::string>{"a", "c", "d"}));
  ASSERT_TRUE(reg("e").ok());
  EXPECT_EQ(ids(), (std::set<std::string>{"a", "d", "e"}));
  o.max_nodes = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(Coordinator::Create(o).status()));
}

// A cluster past --max-heartbeat-rate is told a longer interval and lease
// in every registration and heartbeat reply, and is held to that lease,
// not the configured one.
TEST(CoordinatorCadenceTest, RepliesCarryTheIntervalAndLeaseTheClusterHas) {
  FakeClock clock;
  CoordinatorOptions o;
  o.clock = &clock;
  o.lease.heartbeat_interval = absl::Seconds(1);
  o.lease.lease_timeout = absl::Seconds(3);
  o.lease.max_heartbeat_rate = 2;
  std::unique_ptr<Coordinator> c = Coordinator::Create(o).value();
  auto reg = [&](const std::string& id) {
    return c->RegisterNode(RegisterRequest(id, 1, "inc")).value();
  };
  v1::RegisterNodeResponse a = reg("a");
  EXPECT_EQ(FromProto(a.heartbeat_interval()), absl::Seconds(1));
  EXPECT_EQ(FromProto(a.lease_timeout()), absl::Seconds(3));
  reg("b");
  reg("c");
  v1::RegisterNodeResponse d = reg("d");  // 4 nodes at 1 s: twice the rate
  EXPECT_EQ(FromProto(d.heartbeat_interval()), absl::Seconds(2));
  EXPECT_EQ(FromProto(d.lease_timeout()), absl::Seconds(6));
  v1::HeartbeatRequest hb;
  hb.set_node_id("a");
  hb.set_incarnation("inc");
  absl::StatusOr<v1::HeartbeatResponse> r = c->Heartbeat(hb);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(FromProto(r->heartbeat_interval()), absl::Seconds(2));
  EXPECT_EQ(FromProto(r->lease_timeout()), absl::Seconds(6));
  EXPECT_EQ(FromProto(r->lease_expiry()), clock.Now() + absl::Seconds(6));
  // 5 s without a heartbeat: past the configured 3 s lease, within the 6 s.
  clock.Advance(absl::Seconds(5));
  c->Tick();
  EXPECT_EQ(coordinator_testing::FindNode(*c, "a")->state(), v1::NODE_STATE_ALIVE);
  clock.Advance(absl::Seconds(1));
  c->Tick();
  EXPECT_EQ(coordinator_testing::FindNode(*c, "a")->state(), v1::NODE_STATE_LOST);
}

TEST(CoordinatorNodesRestartTest, ADrainAndWhenANodeWasLostSurviveAServiceRestart) {
  char tmpl[] = "/tmp/elastrun_coordinator_nodes_test.XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  FakeClock clock;
  CoordinatorOptions o;
  o.clock = &clock;
  o.state_path = dir + "/state.db";
  o.lease.lease_timeout = kLease;
  o.lease.node_expiry = kExpiry;
  auto reg = [&](Coordinator& c, const std::string& id, const std::string& inc) {
    return c.RegisterNode(RegisterRequest(id, 1, inc)).status();
  };
  auto node = coordinator_testing::FindNode;
  {
    std::unique_ptr<Coordinator> c = Coordinator::Create(o).value();
    ASSERT_TRUE(reg(*c, "a", "inc-1").ok());
    ASSERT_TRUE(reg(*c, "b", "inc-1").ok());
    v1::NodeRequest drain;
    drain.set_node_id("a");
    ASSERT_TRUE(c->DrainNode(drain).ok());
    clock.Advance(kLease);
    c->Tick();  // both lost now
  }
  const absl::Time lost = clock.Now();
  clock.Advance(kExpiry / 2);
  std::unique_ptr<Coordinator> c = Coordinator::Create(o).value();
  ASSERT_EQ(node(*c, "b")->state(), v1::NODE_STATE_LOST);
  EXPECT_TRUE(node(*c, "a")->draining());
  // a's daemon is back (a new incarnation): still drained.
  ASSERT_TRUE(reg(*c, "a", "inc-2").ok());
  EXPECT_TRUE(node(*c, "a")->draining());
  EXPECT_EQ(node(*c, "a")->state(), v1::NODE_STATE_ALIVE);
  // b expires counted from when it was lost, not from the restart.
  clock.Set(lost + kExpiry - absl::Milliseconds(1));
  v1::HeartbeatRequest hb;
  hb.set_node_id("a");
  hb.set_incarnation("inc-2");
  ASSERT_TRUE(c->Heartbeat(hb).ok());
  c->Tick();
  EXPECT_TRUE(node(*c, "b").has_value());
  clock.Set(lost + kExpiry);
  ASSERT_TRUE(c->Heartbeat(hb).ok());
  c->Tick();
  EXPECT_FALSE(node(*c, "b").has_value());
  EXPECT_TRUE(node(*c, "a").has_value());
  c.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace elastrun::rendezvous
