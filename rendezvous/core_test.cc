// Round forming: validation, closing rules, timers, stable ranks, offsets,
// scale, restore. Failures, success and cancel are in core_lifecycle_test.cc.
#include "rendezvous/core.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/core_test_util.h"

namespace elastrun::rendezvous {
namespace {

using ::elastrun::rendezvous::testing::Config;
using ::elastrun::rendezvous::testing::Fail;
using ::elastrun::rendezvous::testing::Kinds;
using ::elastrun::rendezvous::testing::MustJoin;
using ::elastrun::rendezvous::testing::RankOrder;
using ::elastrun::rendezvous::testing::Req;
using ::elastrun::rendezvous::testing::T0;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = Event::Kind;

TEST(ValidateRoundConfigTest, NamesTheField) {
  EXPECT_TRUE(ValidateRoundConfig(RoundConfig{}).ok());
  auto expect_bad = [](RoundConfig c, absl::string_view field) {
    absl::Status st = ValidateRoundConfig(c);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(st.message(), HasSubstr(field));
  };
  RoundConfig c;
  c.min_nodes = 0;
  expect_bad(c, "min_nodes");
  c = RoundConfig{};
  c.min_nodes = 3;
  c.max_nodes = 2;
  expect_bad(c, "max_nodes");
  c = RoundConfig{};
  c.last_call_timeout = absl::Seconds(-1);
  expect_bad(c, "last_call_timeout");
  c = RoundConfig{};
  c.join_timeout = absl::ZeroDuration();
  expect_bad(c, "join_timeout");
  c = RoundConfig{};
  c.max_restarts = -1;
  expect_bad(c, "max_restarts");
  EXPECT_FALSE(RendezvousCore::Create("job", c, T0()).ok());
  EXPECT_TRUE(RendezvousCore::Create("job", Config(1, 2), T0()).ok());
}

TEST(JoinTest, BadRequestsNameTheField) {
  RendezvousCore core("job", Config(1, 2), T0());
  auto expect_bad = [&](JoinRequest r, absl::string_view field) {
    auto ev = core.Join(r, T0());
    ASSERT_FALSE(ev.ok()) << field;
    EXPECT_EQ(ev.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ev.status().message(), HasSubstr(field));
  };
  JoinRequest r = Req("n1");
  r.node_id = "";
  expect_bad(r, "node_id");
  r = Req("n1");
  r.addr = "";
  expect_bad(r, "addr");
  r = Req("n1");
  r.master_port = 70000;
  expect_bad(r, "master_port");
  r.master_port = 0;
  expect_bad(r, "master_port");
  r = Req("n1");
  r.local_world_size = 0;
  expect_bad(r, "local_world_size");
  EXPECT_EQ(core.joined_count(), 0);
}

TEST(JoinTest, SingleNodeClosesImmediately) {
  RoundConfig c;  // defaults: 1:1
  RendezvousCore core("job", c, T0());
  EXPECT_EQ(core.state(), JobState::kJoining);
  EXPECT_EQ(core.assignment(), nullptr);
  std::vector<Event> ev = MustJoin(core, Req("solo", 4), T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  ASSERT_TRUE(ev[0].assignment.has_value());
  const RoundAssignment& a = *ev[0].assignment;
  EXPECT_EQ(a.round, 0);
  EXPECT_EQ(a.world_size, 4);
  EXPECT_EQ(a.group_world_size, 1);
  EXPECT_EQ(a.master_addr, "solo.cluster");
  EXPECT_EQ(a.master_port, Req("solo").master_port);
  ASSERT_NE(a.Find("solo"), nullptr);
  EXPECT_EQ(a.Find("solo")->rank_offset, 0);
  EXPECT_EQ(a.Find("other"), nullptr);
  EXPECT_EQ(core.state(), JobState::kRunning);
  ASSERT_NE(core.assignment(), nullptr);
  EXPECT_EQ(core.assignment()->world_size, 4);
  EXPECT_FALSE(core.NextDeadline().has_value());
  EXPECT_EQ(core.history()[0].closed_time, T0());
}

TEST(JoinTest, LastCallClosesAfterTimeout) {
  RendezvousCore core("job", Config(2, 4), T0());
  EXPECT_EQ(core.NextDeadline(), T0() + absl::Seconds(60));  // join timeout
  EXPECT_TRUE(MustJoin(core, Req("a"), T0()).empty());
  const absl::Time min_time = T0() + absl::Seconds(1);
  EXPECT_TRUE(MustJoin(core, Req("b"), min_time).empty());
  EXPECT_EQ(core.NextDeadline(), min_time + absl::Seconds(5));
  // A third join does not extend the last call.
  EXPECT_TRUE(MustJoin(core, Req("c"), T0() + absl::Seconds(3)).empty());
  EXPECT_EQ(core.NextDeadline(), min_time + absl::Seconds(5));
  EXPECT_TRUE(core.Tick(min_time + absl::Seconds(5) - absl::Nanoseconds(1)).empty());
  std::vector<Event> ev = core.Tick(min_time + absl::Seconds(5));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[0].assignment), ElementsAre("a", "b", "c"));
  EXPECT_EQ(core.state(), JobState::kRunning);
  EXPECT_TRUE(core.Tick(T0() + absl::Hours(1)).empty());
}

TEST(JoinTest, ZeroLastCallClosesOnTheNextTick) {
  RoundConfig c = Config(1, 2);
  c.last_call_timeout = absl::ZeroDuration();
  RendezvousCore core("job", c, T0());
  EXPECT_TRUE(MustJoin(core, Req("a"), T0()).empty());
  EXPECT_EQ(core.NextDeadline(), T0());
  EXPECT_THAT(Kinds(core.Tick(T0())), ElementsAre(Kind::kRoundClosed));
}

TEST(JoinTest, ClosesAtMaxBeforeLastCall) {
  RendezvousCore core("job", Config(1, 3), T0());
  EXPECT_TRUE(MustJoin(core, Req("a"), T0()).empty());
  EXPECT_TRUE(MustJoin(core, Req("b"), T0()).empty());
  std::vector<Event> ev = MustJoin(core, Req("c"), T0() + absl::Seconds(1));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_EQ(ev[0].assignment->group_world_size, 3);
  EXPECT_EQ(core.history()[0].closed_time, T0() + absl::Seconds(1));
  EXPECT_TRUE(core.Tick(T0() + absl::Seconds(10)).empty());
}

TEST(JoinTest, JoinTimeoutFailsTheJobNamingTheCount) {
  RendezvousCore core("job", Config(3, 3), T0());
  MustJoin(core, Req("a"), T0());
  MustJoin(core, Req("b"), T0() + absl::Seconds(10));
  EXPECT_EQ(core.NextDeadline(), T0() + absl::Seconds(60));
  EXPECT_TRUE(core.Tick(T0() + absl::Seconds(59)).empty());
  std::vector<Event> ev = core.Tick(T0() + absl::Seconds(60));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kJobFinished));
  EXPECT_EQ(ev[0].final_state, JobState::kFailed);
  EXPECT_THAT(ev[0].reason, HasSubstr("2 of min_nodes=3"));
  EXPECT_EQ(core.state(), JobState::kFailed);
  EXPECT_EQ(core.history()[0].end_reason, RoundEnd::kJoinTimeout);
  EXPECT_FALSE(core.root_cause().has_value());
  EXPECT_FALSE(core.NextDeadline().has_value());
  auto late = core.Join(Req("c"), T0() + absl::Seconds(61));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.status().message(), HasSubstr("\"c\""));
  EXPECT_THAT(late.status().message(), HasSubstr("round 0"));
  EXPECT_THAT(late.status().message(), HasSubstr("FAILED"));
}

TEST(JoinTest, DuplicateJoinIsRefusedWithNodeRoundAndState) {
  RendezvousCore core("job", Config(2, 2), T0());
  MustJoin(core, Req("a"), T0());
  auto dup = core.Join(Req("a"), T0());
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(dup.status().message(), HasSubstr("\"a\""));
  EXPECT_THAT(dup.status().message(), HasSubstr("round 0"));
  EXPECT_THAT(dup.status().message(), HasSubstr("JOINING"));
  MustJoin(core, Req("b"), T0());
  dup = core.Join(Req("b"), T0());
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(dup.status().message(), HasSubstr("RUNNING"));
}

TEST(JoinTest, NodeLostWhileJoiningCancelsTheLastCall) {
  RendezvousCore core("job", Config(2, 3), T0());
  MustJoin(core, Req("a"), T0());
  MustJoin(core, Req("b"), T0());
  EXPECT_EQ(core.NextDeadline(), T0() + absl::Seconds(5));
  EXPECT_TRUE(core.NodeLost("b", T0() + absl::Seconds(1)).empty());
  EXPECT_EQ(core.joined_count(), 1);
  EXPECT_EQ(core.NextDeadline(), T0() + absl::Seconds(60));
  EXPECT_TRUE(core.Tick(T0() + absl::Seconds(5)).empty());
  EXPECT_TRUE(core.NodeLost("unknown", T0()).empty());
  // b may come back; the last call restarts from the moment MIN is reached.
  MustJoin(core, Req("b"), T0() + absl::Seconds(20));
  EXPECT_EQ(core.NextDeadline(), T0() + absl::Seconds(25));
  std::vector<Event> ev = core.Tick(T0() + absl::Seconds(25));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[0].assignment), ElementsAre("a", "b"));
}

TEST(CloseNowTest, ClosesAJoiningRoundWithMinNodesAtOnce) {
  RendezvousCore core("job", Config(2, 3), T0());
  MustJoin(core, Req("a"), T0());
  MustJoin(core, Req("b"), T0() + absl::Seconds(1));
  const absl::Time now = T0() + absl::Seconds(2);  // last call would end at 6 s
  absl::StatusOr<std::vector<Event>> ev = core.CloseNow(now);
  ASSERT_TRUE(ev.ok()) << ev.status();
  ASSERT_THAT(Kinds(*ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*(*ev)[0].assignment), ElementsAre("a", "b"));
  EXPECT_EQ(core.state(), JobState::kRunning);
  EXPECT_EQ(core.history()[0].closed_time, now);
  EXPECT_EQ(core.NextDeadline(), std::nullopt);  // no last call left to fire
  EXPECT_TRUE(core.Tick(T0() + absl::Seconds(10)).empty());
}

TEST(CloseNowTest, RefusesBelowMinRunningOrFinishedAndChangesNothing) {
  RendezvousCore core("job", Config(2, 3), T0());
  MustJoin(core, Req("a"), T0());
  absl::StatusOr<std::vector<Event>> ev = core.CloseNow(T0());
  EXPECT_EQ(ev.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ev.status().message(), HasSubstr("1 of min_nodes=2"));
  EXPECT_EQ(core.state(), JobState::kJoining);
  EXPECT_EQ(core.joined_count(), 1);

  MustJoin(core, Req("b"), T0());
  MustJoin(core, Req("c"), T0());  // max: closed
  ev = core.CloseNow(T0());
  EXPECT_EQ(ev.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ev.status().message(), HasSubstr("not joining"));
  EXPECT_EQ(core.round(), 0);

  core.Cancel("test", T0());
  ev = core.CloseNow(T0());
  EXPECT_EQ(ev.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ev.status().message(), HasSubstr("finished"));
}

TEST(CloseNowTest, KeepsStableRanksInAReformedRound) {
  RendezvousCore core("job", Config(2, 3, /*max_restarts=*/1), T0());
  for (const char* id : {"a", "b", "c"}) MustJoin(core, Req(id), T0());
  core.NodeLost("a", T0() + absl::Seconds(1));  // round 1 opens
  MustJoin(core, Req("c"), T0() + absl::Seconds(1));
  MustJoin(core, Req("b"), T0() + absl::Seconds(1));
  absl::StatusOr<std::vector<Event>> ev = core.CloseNow(T0() + absl::Seconds(1));
  ASSERT_TRUE(ev.ok()) << ev.status();
  ASSERT_THAT(Kinds(*ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_EQ((*ev)[0].round, 1);
  // b keeps rank 1; c (rank 2 >= 2 nodes) takes the free rank 0.
  EXPECT_THAT(RankOrder(*(*ev)[0].assignment), ElementsAre("c", "b"));
}

TEST(RanksTest, OffsetsWithMixedLocalWorldSizes) {
  RendezvousCore core("job", Config(3, 3), T0());
  MustJoin(core, Req("a", 4), T0());
  MustJoin(core, Req("b", 2), T0());
  std::vector<Event> ev = MustJoin(core, Req("c", 8), T0());
  const RoundAssignment& a = *ev[0].assignment;
  EXPECT_EQ(a.world_size, 14);
  EXPECT_EQ(a.Find("a")->rank_offset, 0);
  EXPECT_EQ(a.Find("b")->rank_offset, 4);
  EXPECT_EQ(a.Find("c")->rank_offset, 6);
  EXPECT_EQ(a.Find("c")->local_world_size, 8);
  EXPECT_EQ(a.Find("c")->addr, "c.cluster");
}

TEST(RanksTest, StableAcrossAFailureRound) {
  RendezvousCore core("job", Config(3, 3, /*max_restarts=*/1), T0());
  for (const char* id : {"a", "b", "c"}) MustJoin(core, Req(id), T0());
  ASSERT_TRUE(core.ReportFailure(Fail("b", 0, T0(), 1), T0()).ok());
  ASSERT_EQ(core.state(), JobState::kJoining);
  // Rejoin in reverse order: everyone keeps their rank.
  MustJoin(core, Req("c"), T0());
  MustJoin(core, Req("b"), T0());
  std::vector<Event> ev = MustJoin(core, Req("a"), T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_EQ(ev[0].round, 1);
  EXPECT_EQ(ev[0].assignment->restart_count, 1);
  EXPECT_THAT(RankOrder(*ev[0].assignment), ElementsAre("a", "b", "c"));
  EXPECT_EQ(ev[0].assignment->master_addr, "a.cluster");
}

// 3 nodes, rank 1 lost: survivors get ranks 0 and 1; the rank-0 node keeps 0.
TEST(RanksTest, StableAcrossANodeLossRound) {
  RendezvousCore core("job", Config(2, 3), T0());
  for (const char* id : {"a", "b", "c"}) MustJoin(core, Req(id), T0());
  std::vector<Event> ev = core.NodeLost("b", T0() + absl::Seconds(1));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundEnded));
  EXPECT_EQ(ev[0].end, RoundEnd::kNodeLost);
  EXPECT_EQ(ev[0].round, 0);
  EXPECT_EQ(core.round(), 1);
  EXPECT_EQ(core.restart_count(), 0);
  EXPECT_EQ(core.history()[0].end_reason, RoundEnd::kNodeLost);
  EXPECT_FALSE(core.history()[0].counted_as_restart);
  MustJoin(core, Req("c"), T0() + absl::Seconds(2));
  MustJoin(core, Req("a"), T0() + absl::Seconds(3));
  ev = core.Tick(T0() + absl::Seconds(8));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[0].assignment), ElementsAre("a", "c"));
  EXPECT_EQ(ev[0].assignment->restart_count, 0);
}

TEST(RanksTest, LosingRankZeroMovesMasterToAnotherNode) {
  RendezvousCore core("job", Config(2, 3), T0());
  for (const char* id : {"a", "b", "c"}) MustJoin(core, Req(id), T0());
  core.NodeLost("a", T0());
  MustJoin(core, Req("c"), T0());
  MustJoin(core, Req("b"), T0());
  std::vector<Event> ev = core.Tick(T0() + absl::Seconds(5));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[0].assignment), ElementsAre("c", "b"));  // b keeps 1
  EXPECT_EQ(ev[0].assignment->master_addr, "c.cluster");
  EXPECT_EQ(ev[0].assignment->master_port, Req("c").master_port);
}

TEST(RanksTest, NewcomersFillFreeRanksWithoutDisplacingSurvivors) {
  RendezvousCore core("job", Config(2, 3), T0());
  for (const char* id : {"a", "b", "c"}) MustJoin(core, Req(id), T0());
  core.NodeLost("b", T0());
  MustJoin(core, Req("d"), T0());  // new, joins first
  MustJoin(core, Req("c"), T0());
  std::vector<Event> ev = MustJoin(core, Req("a"), T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[0].assignment), ElementsAre("a", "d", "c"));
}

TEST(RanksTest, AskedForRanksComeFirst) {
  RendezvousCore core("job", Config(3, 3, /*max_restarts=*/1), T0());
  JoinRequest c = Req("c"), b = Req("b"), x = Req("x");
  c.wanted_group_rank = 0;
  b.wanted_group_rank = 2;
  x.wanted_group_rank = 2;  // taken by b, who asked first: x gets a free rank
  MustJoin(core, b, T0());
  MustJoin(core, x, T0());
  std::vector<Event> ev = MustJoin(core, c, T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[0].assignment), ElementsAre("c", "x", "b"));
  EXPECT_EQ(ev[0].assignment->master_addr, "c.cluster");
  // The next round keeps them, whatever the order of joining.
  ASSERT_TRUE(core.ReportFailure(Fail("b", 0, T0(), 1), T0()).ok());
  MustJoin(core, x, T0());
  MustJoin(core, b, T0());
  ev = MustJoin(core, c, T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[0].assignment), ElementsAre("c", "x", "b"));
  JoinRequest bad = Req("z");
  bad.wanted_group_rank = -2;
  EXPECT_FALSE(RendezvousCore("j", Config(1, 1), T0()).Join(bad, T0()).ok());
}

TEST(ScaleTest, ThousandNodesJoinOneRound) {
  constexpr int kN = 1000;
  RendezvousCore core("big", Config(1, kN), T0());
  auto lws = [](int i) { return i % 3 + 1; };
  std::vector<Event> ev;
  for (int i = 0; i < kN; ++i) {
    ev = MustJoin(core, Req(absl::StrCat("node-", i), lws(i)), T0());
    if (i + 1 < kN) {
      ASSERT_TRUE(ev.empty());
    }
  }
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  auto check = [&](const RoundAssignment& a, int n) {
    ASSERT_EQ(a.group_world_size, n);
    ASSERT_EQ(a.nodes.size(), static_cast<size_t>(n));
    std::set<std::string> ids;
    int offset = 0;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(a.nodes[r].group_rank, r);
      EXPECT_EQ(a.nodes[r].rank_offset, offset);
      offset += a.nodes[r].local_world_size;
      ids.insert(a.nodes[r].node_id);
    }
    EXPECT_EQ(ids.size(), static_cast<size_t>(n));
    EXPECT_EQ(a.world_size, offset);
  };
  check(*ev[0].assignment, kN);
  EXPECT_EQ(ev[0].assignment->nodes[7].node_id, "node-7");

  // Node lost at rank 500: the others rejoin in reverse order; everyone below
  // rank 999 keeps their rank and node-999 takes the free rank 500.
  ASSERT_THAT(Kinds(core.NodeLost("node-500", T0())), ElementsAre(Kind::kRoundEnded));
  for (int i = kN - 1; i >= 0; --i) {
    if (i != 500) MustJoin(core, Req(absl::StrCat("node-", i), lws(i)), T0());
  }
  ev = core.Tick(T0() + absl::Seconds(5));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  check(*ev[0].assignment, kN - 1);
  EXPECT_EQ(ev[0].assignment->nodes[500].node_id, "node-999");
  EXPECT_EQ(ev[0].assignment->nodes[998].node_id, "node-998");
  EXPECT_EQ(ev[0].assignment->nodes[0].node_id, "node-0");
}

TEST(RestoreTest, ContinuesFromASnapshot) {
  RendezvousCore core("job", Config(2, 3, 1), T0());
  for (const char* id : {"a", "b", "c"}) MustJoin(core, Req(id), T0());
  ASSERT_TRUE(core.ReportSuccess("a", 0, T0()).ok());
  RendezvousState saved = core.state_snapshot();  // plain copy
  auto restored = RendezvousCore::Restore(saved);
  ASSERT_TRUE(restored.ok()) << restored.status();
  RendezvousCore& r = **restored;
  EXPECT_EQ(r.state(), JobState::kRunning);
  EXPECT_TRUE(r.ReportSuccess("b", 0, T0())->empty());
  auto dup = r.Join(Req("a"), T0());
  EXPECT_FALSE(dup.ok());
  std::vector<Event> ev = *r.ReportSuccess("c", 0, T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kJobFinished));
  EXPECT_EQ(ev[0].final_state, JobState::kSucceeded);

  // A JOINING snapshot keeps the joined nodes, the last call and old ranks.
  RendezvousCore core2("job", Config(2, 3, 1), T0());
  for (const char* id : {"a", "b", "c"}) MustJoin(core2, Req(id), T0());
  ASSERT_TRUE(core2.ReportFailure(Fail("a", 0, T0()), T0()).ok());
  MustJoin(core2, Req("c"), T0());
  MustJoin(core2, Req("b"), T0() + absl::Seconds(1));
  auto r2 = RendezvousCore::Restore(core2.state_snapshot());
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ((*r2)->NextDeadline(), T0() + absl::Seconds(6));
  EXPECT_FALSE((*r2)->Join(Req("b"), T0()).ok());
  ev = (*r2)->Tick(T0() + absl::Seconds(6));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[0].assignment), ElementsAre("c", "b"));  // b keeps 1
}

TEST(RestoreTest, RejectsInconsistentState) {
  RendezvousCore core("job", Config(1, 2), T0());
  RendezvousState s = core.state_snapshot();
  s.rounds.clear();
  auto r = RendezvousCore::Restore(s);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("no rounds"));
  s = core.state_snapshot();
  s.config.max_nodes = 0;
  EXPECT_THAT(RendezvousCore::Restore(s).status().message(), HasSubstr("max_nodes"));
  s = core.state_snapshot();
  s.state = JobState::kRunning;
  EXPECT_FALSE(RendezvousCore::Restore(s).ok());
  // A joined node without the last call that MIN requires.
  MustJoin(core, Req("a"), T0());
  s = core.state_snapshot();
  EXPECT_TRUE(ValidateRendezvousState(s).ok());
  s.min_reached_time.reset();
  EXPECT_THAT(ValidateRendezvousState(s).message(), HasSubstr("min_reached_time"));
  s = core.state_snapshot();
  s.spares.emplace(s.next_seq++, WaitingNode{Req("a"), T0()});
  EXPECT_THAT(ValidateRendezvousState(s).message(), HasSubstr("\"a\" is waiting twice"));
}

TEST(JobStateNameTest, Names) {
  EXPECT_EQ(JobStateName(JobState::kJoining), "JOINING");
  EXPECT_EQ(JobStateName(JobState::kRunning), "RUNNING");
  EXPECT_EQ(JobStateName(JobState::kSucceeded), "SUCCEEDED");
  EXPECT_EQ(JobStateName(JobState::kFailed), "FAILED");
  EXPECT_EQ(JobStateName(JobState::kCancelled), "CANCELLED");
}

// The names are what the API and state files carry: each reads back as the
// end it names, none twice, and a name this version does not know is none.
TEST(RoundEndTest, NamesReadBack) {
  std::set<std::string> names;
  for (RoundEnd e :
       {RoundEnd::kNone, RoundEnd::kFailure, RoundEnd::kFailed, RoundEnd::kNodeLost,
        RoundEnd::kScaleUp, RoundEnd::kCancelled, RoundEnd::kAbandoned,
        RoundEnd::kSucceeded, RoundEnd::kJoinTimeout}) {
    EXPECT_EQ(RoundEndFromName(RoundEndName(e)), e) << RoundEndName(e);
    EXPECT_TRUE(names.insert(std::string(RoundEndName(e))).second) << RoundEndName(e);
  }
  EXPECT_EQ(RoundEndName(RoundEnd::kNodeLost), "node lost");
  EXPECT_EQ(RoundEndFromName("preempted"), RoundEnd::kNone);
}

}  // namespace
}  // namespace elastrun::rendezvous
