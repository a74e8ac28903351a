// Failures, restarts, root cause, success, scale-up, spares, cancel and
// events after the job finished.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/core.h"
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

absl::Duration S(int s) { return absl::Seconds(s); }

// A core whose round 0 runs with nodes a, b, c (ranks 0, 1, 2).
RendezvousCore Running3(int max_restarts, int min_nodes = 3) {
  RendezvousCore core("job", Config(min_nodes, 3, max_restarts), T0());
  for (const char* id : {"a", "b", "c"}) MustJoin(core, Req(id), T0());
  EXPECT_EQ(core.state(), JobState::kRunning);
  return core;
}

void RejoinAll(RendezvousCore& core, absl::Time now) {
  for (const char* id : {"a", "b", "c"}) MustJoin(core, Req(id), now);
}

TEST(FailureTest, RestartsUpToMaxThenFailsWithEarliestRootCause) {
  RendezvousCore core = Running3(/*max_restarts=*/2);
  for (int round = 0; round < 2; ++round) {
    std::vector<Event> ev =
        *core.ReportFailure(Fail("b", round, T0() + S(round), 1), T0() + S(round));
    ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundEnded));
    EXPECT_EQ(ev[0].end, RoundEnd::kFailure);
    EXPECT_EQ(ev[0].round, round);
    EXPECT_EQ(core.restart_count(), round + 1);
    EXPECT_EQ(core.round(), round + 1);
    EXPECT_EQ(core.state(), JobState::kJoining);
    EXPECT_TRUE(core.history()[round].counted_as_restart);
    RejoinAll(core, T0() + S(round));
    EXPECT_EQ(core.assignment()->restart_count, round + 1);
  }
  // Round 2: budget spent. c fails at t+10, reported first.
  std::vector<Event> ev =
      *core.ReportFailure(Fail("c", 2, T0() + S(10), 2), T0() + S(11));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundEnded, Kind::kJobFinished));
  EXPECT_EQ(ev[0].end, RoundEnd::kFailure);
  EXPECT_EQ(ev[1].final_state, JobState::kFailed);
  EXPECT_THAT(ev[1].reason, HasSubstr("\"c\""));
  EXPECT_THAT(ev[1].reason, HasSubstr("2 of 2 restarts"));
  EXPECT_EQ(core.state(), JobState::kFailed);
  EXPECT_EQ(core.restart_count(), 2);
  EXPECT_EQ(core.assignment(), nullptr);
  ASSERT_TRUE(core.root_cause().has_value());
  EXPECT_EQ(core.root_cause()->node_id, "c");
  // a's worker died earlier but its report arrives later: it becomes the
  // root cause; a later-timed report does not.
  EXPECT_TRUE(core.ReportFailure(Fail("a", 2, T0() + S(9)), T0() + S(12))->empty());
  EXPECT_EQ(core.root_cause()->node_id, "a");
  EXPECT_TRUE(core.ReportFailure(Fail("b", 2, T0() + S(20), 1), T0() + S(13))->empty());
  EXPECT_EQ(core.root_cause()->node_id, "a");
  EXPECT_EQ(core.history()[2].failures.size(), 3u);
  EXPECT_EQ(core.history()[2].end_reason, RoundEnd::kFailed);
  EXPECT_FALSE(core.history()[2].counted_as_restart);
}

// The one restart policy: `elastrun run` and elastrund both report a
// program that cannot be started as cannot_start, and the core fails the job
// without spending any of its restarts.
TEST(FailureTest, CannotStartFailsAtOnceWithRestartsLeft) {
  RendezvousCore core = Running3(/*max_restarts=*/3);
  Failure f = Fail("b", 0, T0() + S(1), 1);
  f.exit_code = 127;
  f.cannot_start = true;
  f.message = "cannot run 'trian.py': not found on PATH";
  std::vector<Event> ev = *core.ReportFailure(f, T0() + S(1));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundEnded, Kind::kJobFinished));
  EXPECT_EQ(ev[1].final_state, JobState::kFailed);
  EXPECT_THAT(ev[1].reason, HasSubstr("could not be started"));
  EXPECT_THAT(ev[1].reason, HasSubstr("trian.py"));
  EXPECT_EQ(core.restart_count(), 0);
  ASSERT_TRUE(core.root_cause().has_value());
  EXPECT_TRUE(core.root_cause()->cannot_start);
}

TEST(FailureTest, MaxRestartsZeroFailsAtOnce) {
  RendezvousCore core("job", RoundConfig{}, T0());
  MustJoin(core, Req("solo", 2), T0());
  Failure f = Fail("solo", 0, T0());
  f.signal = 9;
  f.local_rank = 1;
  f.rank = 1;
  std::vector<Event> ev = *core.ReportFailure(f, T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundEnded, Kind::kJobFinished));
  EXPECT_THAT(ev[1].reason, HasSubstr("signal 9"));
  EXPECT_THAT(ev[1].reason, HasSubstr("boom on solo"));
}

TEST(FailureTest, LaterFailuresOfTheSameRoundAreStale) {
  RendezvousCore core = Running3(/*max_restarts=*/3);
  ASSERT_EQ(core.ReportFailure(Fail("a", 0, T0()), T0())->size(), 1u);
  EXPECT_EQ(core.restart_count(), 1);
  // Nodes stopped by the restart report their workers' exits for round 0.
  EXPECT_TRUE(core.ReportFailure(Fail("b", 0, T0(), 1), T0())->empty());
  EXPECT_TRUE(core.ReportFailure(Fail("zzz", 0, T0()), T0())->empty());
  EXPECT_TRUE(core.ReportSuccess("c", 0, T0())->empty());
  EXPECT_EQ(core.restart_count(), 1);
  EXPECT_EQ(core.round(), 1);
  RejoinAll(core, T0());
  EXPECT_TRUE(core.ReportFailure(Fail("b", 0, T0(), 1), T0())->empty());
  EXPECT_EQ(core.state(), JobState::kRunning);
}

TEST(FailureTest, BadReportsNameNodeAndRound) {
  RendezvousCore core = Running3(/*max_restarts=*/1);
  auto unknown = core.ReportFailure(Fail("ghost", 0, T0()), T0());
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("\"ghost\""));
  auto future = core.ReportFailure(Fail("a", 5, T0()), T0());
  ASSERT_FALSE(future.ok());
  EXPECT_EQ(future.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(future.status().message(), HasSubstr("round 5"));
  Failure f = Fail("a", 0, T0());
  f.local_rank = 1;  // a has one worker
  EXPECT_THAT(core.ReportFailure(f, T0()).status().message(), HasSubstr("local_rank"));
  EXPECT_FALSE(core.ReportSuccess("ghost", 0, T0()).ok());
  EXPECT_FALSE(core.ReportSuccess("a", 1, T0()).ok());
  EXPECT_EQ(core.state(), JobState::kRunning);
  EXPECT_TRUE(core.history()[0].failures.empty());

  // Round 1 open but not closed: no worker can have failed in it yet.
  ASSERT_TRUE(core.ReportFailure(Fail("a", 0, T0()), T0()).ok());
  auto early = core.ReportFailure(Fail("a", 1, T0()), T0());
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(early.status().message(), HasSubstr("round 1"));
}

TEST(SuccessTest, AllNodesSucceedFinishesTheJob) {
  RendezvousCore core = Running3(/*max_restarts=*/0);
  EXPECT_TRUE(core.ReportSuccess("a", 0, T0())->empty());
  EXPECT_TRUE(core.ReportSuccess("a", 0, T0())->empty());  // repeat
  EXPECT_TRUE(core.ReportSuccess("b", 0, T0())->empty());
  std::vector<Event> ev = *core.ReportSuccess("c", 0, T0() + S(3));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kJobFinished));
  EXPECT_EQ(ev[0].final_state, JobState::kSucceeded);
  EXPECT_THAT(ev[0].reason, HasSubstr("all 3 nodes"));
  EXPECT_EQ(core.state(), JobState::kSucceeded);
  EXPECT_EQ(core.assignment(), nullptr);
  EXPECT_EQ(core.history()[0].end_reason, RoundEnd::kSucceeded);
  EXPECT_EQ(core.history()[0].ended_time, T0() + S(3));
  EXPECT_THAT(core.history()[0].succeeded, ElementsAre("a", "b", "c"));
  // Finished: reports are no-ops, Join is refused.
  EXPECT_TRUE(core.ReportSuccess("c", 0, T0())->empty());
  EXPECT_TRUE(core.ReportFailure(Fail("c", 0, T0()), T0())->empty());
  EXPECT_FALSE(core.Join(Req("d"), T0()).ok());
}

// Documented choice: success is provisional until the whole round succeeds.
TEST(SuccessTest, FailureAfterPartialSuccessRestartsEveryone) {
  RendezvousCore core = Running3(/*max_restarts=*/1);
  EXPECT_TRUE(core.ReportSuccess("a", 0, T0())->empty());
  auto after = core.ReportFailure(Fail("a", 0, T0()), T0());
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(after.status().message(), HasSubstr("already reported success"));
  std::vector<Event> ev = *core.ReportFailure(Fail("b", 0, T0(), 1), T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundEnded));
  RejoinAll(core, T0());
  EXPECT_EQ(core.assignment()->round, 1);
  for (const char* id : {"a", "b"}) EXPECT_TRUE(core.ReportSuccess(id, 1, T0())->empty());
  EXPECT_EQ(core.ReportSuccess("c", 1, T0())->size(), 1u);
  EXPECT_EQ(core.state(), JobState::kSucceeded);
}

TEST(SuccessTest, LosingASucceededNodeIsNotAMembershipChange) {
  RendezvousCore core = Running3(/*max_restarts=*/0, /*min_nodes=*/2);
  EXPECT_TRUE(core.ReportSuccess("a", 0, T0())->empty());
  EXPECT_TRUE(core.NodeLost("a", T0()).empty());
  EXPECT_EQ(core.state(), JobState::kRunning);
  EXPECT_THAT(core.history()[0].lost_after_success, ElementsAre("a"));
  EXPECT_TRUE(core.ReportSuccess("b", 0, T0())->empty());
  EXPECT_EQ(core.ReportSuccess("c", 0, T0())->size(), 1u);
  EXPECT_EQ(core.state(), JobState::kSucceeded);
}

TEST(ScaleUpTest, NewNodeBelowMaxStartsANewRound) {
  RendezvousCore core("job", Config(1, 3), T0());
  MustJoin(core, Req("a"), T0());
  MustJoin(core, Req("b"), T0());
  ASSERT_THAT(Kinds(core.Tick(T0() + S(5))), ElementsAre(Kind::kRoundClosed));
  std::vector<Event> ev = MustJoin(core, Req("c"), T0() + S(100));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundEnded));
  EXPECT_EQ(ev[0].end, RoundEnd::kScaleUp);
  EXPECT_EQ(ev[0].round, 0);
  EXPECT_EQ(core.round(), 1);
  EXPECT_EQ(core.restart_count(), 0);
  EXPECT_EQ(core.joined_count(), 1);  // c is already in round 1
  EXPECT_EQ(core.history()[0].end_reason, RoundEnd::kScaleUp);
  EXPECT_FALSE(core.Join(Req("c"), T0()).ok());
  MustJoin(core, Req("b"), T0() + S(101));
  ev = MustJoin(core, Req("a"), T0() + S(102));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[0].assignment), ElementsAre("a", "b", "c"));
}

TEST(ScaleUpTest, NodeAtMaxWaitsAsSpareForTheNextRound) {
  RendezvousCore core("job", Config(1, 2, /*max_restarts=*/1), T0());
  MustJoin(core, Req("a"), T0());
  MustJoin(core, Req("b"), T0());
  EXPECT_TRUE(MustJoin(core, Req("c"), T0()).empty());
  EXPECT_EQ(core.spare_count(), 1);
  EXPECT_EQ(core.state(), JobState::kRunning);
  auto dup = core.Join(Req("c"), T0());
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(dup.status().message(), HasSubstr("spare"));
  // A failure restarts; the spare is in round 1 at once.
  ASSERT_EQ(core.ReportFailure(Fail("b", 0, T0(), 1), T0())->size(), 1u);
  EXPECT_EQ(core.spare_count(), 0);
  EXPECT_EQ(core.joined_count(), 1);
  std::vector<Event> ev = MustJoin(core, Req("a"), T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[0].assignment), ElementsAre("a", "c"));
  // Round 1 is at max again: b becomes the spare.
  EXPECT_TRUE(MustJoin(core, Req("b"), T0()).empty());
  EXPECT_EQ(core.spare_count(), 1);
}

TEST(ScaleUpTest, SpareReplacesALostNodeAndCanBeLostItself) {
  RendezvousCore core("job", Config(2, 2), T0());
  MustJoin(core, Req("a"), T0());
  MustJoin(core, Req("b"), T0());
  MustJoin(core, Req("c"), T0());
  MustJoin(core, Req("d"), T0());
  EXPECT_EQ(core.spare_count(), 2);
  EXPECT_TRUE(core.NodeLost("d", T0()).empty());
  EXPECT_EQ(core.spare_count(), 1);
  ASSERT_THAT(Kinds(core.NodeLost("a", T0())), ElementsAre(Kind::kRoundEnded));
  std::vector<Event> ev = MustJoin(core, Req("b"), T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[0].assignment), ElementsAre("c", "b"));
  EXPECT_EQ(core.restart_count(), 0);
}

TEST(ScaleUpTest, SparesBeyondMaxCloseTheNextRoundAtOnce) {
  RendezvousCore core("job", Config(1, 1, 1), T0());
  MustJoin(core, Req("a"), T0());
  MustJoin(core, Req("b"), T0());
  MustJoin(core, Req("c"), T0());
  std::vector<Event> ev = *core.ReportFailure(Fail("a", 0, T0()), T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundEnded, Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[1].assignment), ElementsAre("b"));
  EXPECT_EQ(core.spare_count(), 1);  // c waits for the round after
}

TEST(ScaleUpTest, SparesSurviveARestore) {
  RendezvousCore core("job", Config(1, 1, 1), T0());
  MustJoin(core, Req("a"), T0());
  MustJoin(core, Req("b"), T0());
  auto restored = RendezvousCore::Restore(core.state_snapshot());
  ASSERT_TRUE(restored.ok()) << restored.status();
  RendezvousCore& r = **restored;
  EXPECT_EQ(r.spare_count(), 1);
  EXPECT_FALSE(r.Join(Req("b"), T0()).ok());
  std::vector<Event> ev = r.NodeLost("a", T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundEnded, Kind::kRoundClosed));
  EXPECT_THAT(RankOrder(*ev[1].assignment), ElementsAre("b"));
  EXPECT_EQ(r.history().size(), 2u);
}

TEST(CancelTest, WhileRunningStopsTheRoundThenFinishes) {
  RendezvousCore core = Running3(/*max_restarts=*/1);
  std::vector<Event> ev = core.Cancel("user request", T0() + S(7));
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kRoundEnded, Kind::kJobFinished));
  EXPECT_EQ(ev[0].end, RoundEnd::kCancelled);
  EXPECT_EQ(ev[1].final_state, JobState::kCancelled);
  EXPECT_THAT(ev[1].reason, HasSubstr("user request"));
  EXPECT_EQ(core.state(), JobState::kCancelled);
  EXPECT_EQ(core.history()[0].end_reason, RoundEnd::kCancelled);
  EXPECT_EQ(core.history()[0].ended_time, T0() + S(7));
  // Everything after is a no-op, except Join which is refused.
  EXPECT_TRUE(core.Cancel("again", T0()).empty());
  EXPECT_TRUE(core.NodeLost("a", T0()).empty());
  EXPECT_TRUE(core.Tick(T0() + absl::Hours(2)).empty());
  EXPECT_TRUE(core.ReportFailure(Fail("a", 0, T0()), T0())->empty());
  EXPECT_TRUE(core.ReportSuccess("a", 0, T0())->empty());
  EXPECT_FALSE(core.root_cause().has_value());
  auto join = core.Join(Req("a"), T0());
  ASSERT_FALSE(join.ok());
  EXPECT_THAT(join.status().message(), HasSubstr("CANCELLED"));
  EXPECT_FALSE(core.NextDeadline().has_value());
}

TEST(CancelTest, WhileJoiningOnlyFinishes) {
  RendezvousCore core("job", Config(2, 2), T0());
  MustJoin(core, Req("a"), T0());
  std::vector<Event> ev = core.Cancel("", T0());
  ASSERT_THAT(Kinds(ev), ElementsAre(Kind::kJobFinished));
  EXPECT_EQ(core.joined_count(), 0);
  EXPECT_EQ(core.history()[0].end_reason, RoundEnd::kCancelled);
  EXPECT_FALSE(core.history()[0].closed_time.has_value());
  EXPECT_TRUE(core.ReportFailure(Fail("a", 0, T0()), T0())->empty());
}

}  // namespace
}  // namespace elastrun::rendezvous
