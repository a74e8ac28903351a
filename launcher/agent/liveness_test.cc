#include "launcher/agent/liveness.h"

#include <unistd.h>

#include <map>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

// /proc as the test says it is.
class FakeProcReader : public ProcReader {
 public:
  ProcSample Read(pid_t pid) override { return samples[pid]; }
  std::map<pid_t, ProcSample> samples;
};

ProcSample Running(int64_t ticks) { return {true, 'R', ticks, false}; }
ProcSample Stopped(int64_t ticks) { return {true, 'T', ticks, false}; }

class LivenessTest : public ::testing::Test {
 protected:
  // Samples every worker (pid = 100 + index) at the clock's time.
  void Sample(Liveness& l, size_t n) {
    for (size_t i = 0; i < n; ++i) l.OnSample(i, proc_.Read(100 + i), clock_.Now());
  }
  FakeClock clock_;
  FakeProcReader proc_;
};

TEST_F(LivenessTest, ReportingRankHungAfterTimeoutWithoutNewStep) {
  Liveness l({HangTimeout::After(absl::Seconds(10))}, {0, 1}, clock_.Now());
  l.OnReport(0, 1, clock_.Now());
  l.OnReport(1, 1, clock_.Now());
  clock_.Advance(absl::Seconds(6));
  l.OnReport(0, 2, clock_.Now());
  l.OnReport(1, 1, clock_.Now());  // the same step again is not progress
  // Burning CPU does not count for a rank that reports (a spin in a
  // collective burns CPU too).
  proc_.samples[101] = Running(100);
  Sample(l, 2);
  proc_.samples[101] = Running(900);
  clock_.Advance(absl::Seconds(3));
  Sample(l, 2);
  EXPECT_FALSE(l.Check(clock_.Now()));
  clock_.Advance(absl::Seconds(1));
  auto hang = l.Check(clock_.Now());
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->rank, 1);
  EXPECT_EQ(hang->step, 1);
  EXPECT_TRUE(hang->reported);
  EXPECT_EQ(hang->idle, absl::Seconds(10));
  EXPECT_EQ(DescribeHang(hang->rank, hang->step, hang->idle),
            "rank 1 hung at step 1 (no progress for 10s)");
}

// A rank busy between steps (a long resume or evaluation) sends beats: a
// new beat is progress, a repeated one is not, and neither is a step.
TEST_F(LivenessTest, NewBeatIsProgressButNotAStep) {
  Liveness l({HangTimeout::After(absl::Seconds(10))}, {0, 1}, clock_.Now());
  l.OnReport(0, 5, clock_.Now());
  l.OnReport(1, 5, clock_.Now());
  for (int64_t beat = 1; beat <= 3; ++beat) {
    clock_.Advance(absl::Seconds(8));
    l.OnBeat(0, beat, clock_.Now());
    l.OnBeat(1, 1, clock_.Now());  // rank 1 repeats its first beat
    auto hang = l.Check(clock_.Now());
    if (beat < 3) {
      // t = 8: a new beat for both; t = 16: rank 1 idle for 8 s only.
      EXPECT_FALSE(hang) << beat;
    } else {
      ASSERT_TRUE(hang);
      EXPECT_EQ(hang->rank, 1) << "rank 0 beats on, rank 1 does not";
      EXPECT_EQ(hang->step, 5) << "a beat is not a step";
      EXPECT_EQ(hang->idle, absl::Seconds(16));
    }
  }
  // Beats do not enter the step times of the derived timeout.
  Liveness derived({HangTimeout::Derived(), absl::Minutes(5)}, {0}, clock_.Now());
  derived.OnReport(0, 1, clock_.Now());
  for (int64_t beat = 1; beat <= 5; ++beat) {
    clock_.Advance(absl::Milliseconds(10));
    derived.OnBeat(0, beat, clock_.Now());
  }
  EXPECT_EQ(derived.Timeout(), absl::Minutes(5));
}

// A worker that never reported a step is not "at step -1" after a beat.
TEST_F(LivenessTest, BeatBeforeAnyStepKeepsTheWorkerUnreported) {
  Liveness l({HangTimeout::After(absl::Seconds(10))}, {0}, clock_.Now());
  l.OnBeat(0, 1, clock_.Now());
  clock_.Advance(absl::Seconds(11));
  auto hang = l.Check(clock_.Now());
  ASSERT_TRUE(hang);
  EXPECT_FALSE(hang->reported);
  EXPECT_EQ(hang->idle, absl::Seconds(11));
}

TEST_F(LivenessTest, SilentProgramBurningCpuIsNotHungButIdleOneIs) {
  Liveness l({HangTimeout::After(absl::Seconds(10))}, {0, 1}, clock_.Now());
  for (int t = 0; t <= 30; ++t) {
    proc_.samples[100] = Running(t * 50);  // burns CPU, reports nothing
    proc_.samples[101] = Running(7);       // sleeps
    Sample(l, 2);
    if (t < 10) {
      EXPECT_FALSE(l.Check(clock_.Now())) << t;
    }
    clock_.Advance(absl::Seconds(1));
  }
  auto hang = l.Check(clock_.Now());
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->rank, 1);
  EXPECT_FALSE(hang->reported);
  EXPECT_EQ(DescribeHang(hang->rank, hang->step, hang->idle),
            "rank 1 hung before reporting a step (no progress for 31s)");
}

TEST_F(LivenessTest, StoppedRankIsTheRootCauseEvenWhenOthersWaitedLonger) {
  Liveness l({HangTimeout::After(absl::Seconds(10))}, {4, 5, 6}, clock_.Now());
  // Rank 4 last reported first, then waits in a collective for rank 5,
  // which reported once more and stopped (SIGSTOP).
  l.OnReport(0, 3, clock_.Now());
  clock_.Advance(absl::Seconds(1));
  l.OnReport(1, 3, clock_.Now());
  l.OnReport(2, 3, clock_.Now());
  proc_.samples[100] = Running(1);
  proc_.samples[101] = Stopped(1);
  proc_.samples[102] = Running(1);
  clock_.Advance(absl::Seconds(1));
  Sample(l, 3);
  // A report read after the stop is not progress (but is its newest step).
  l.OnReport(1, 4, clock_.Now());
  clock_.Advance(absl::Seconds(20));
  auto hang = l.Check(clock_.Now());
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->rank, 5);
  EXPECT_EQ(hang->step, 4);
  EXPECT_TRUE(hang->stopped);
}

TEST_F(LivenessTest, StoppedRankIsTheRootCauseBeforeItsOwnTimeout) {
  // Rank 0 reported last at 0 s and waits on rank 1, which reported at 1 s
  // and then stopped: rank 0 times out first, rank 1 is the cause.
  Liveness l({HangTimeout::After(absl::Seconds(10))}, {0, 1}, clock_.Now());
  l.OnReport(0, 5, clock_.Now());
  clock_.Advance(absl::Seconds(1));
  l.OnReport(1, 5, clock_.Now());
  proc_.samples[100] = Running(3);
  proc_.samples[101] = Stopped(3);
  Sample(l, 2);
  clock_.Advance(absl::Seconds(9));
  auto hang = l.Check(clock_.Now());
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->rank, 1);
  EXPECT_TRUE(hang->stopped);
  EXPECT_EQ(hang->idle, absl::Seconds(9));
}

TEST_F(LivenessTest, OldestProgressIsTheRootCauseWithoutAStoppedRank) {
  Liveness l({HangTimeout::After(absl::Seconds(10))}, {0, 1}, clock_.Now());
  l.OnReport(1, 7, clock_.Now());
  clock_.Advance(absl::Seconds(2));
  l.OnReport(0, 8, clock_.Now());
  clock_.Advance(absl::Seconds(30));
  auto hang = l.Check(clock_.Now());
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->rank, 1);
}

TEST_F(LivenessTest, ExitedWorkerIsNeverHung) {
  Liveness l({HangTimeout::After(absl::Seconds(1))}, {0}, clock_.Now());
  proc_.samples[100] = ProcSample{};  // gone
  Sample(l, 1);
  clock_.Advance(absl::Seconds(5));
  EXPECT_FALSE(l.Check(clock_.Now()));
}

TEST_F(LivenessTest, DerivedTimeoutIsFloorOrMultipleOfMedianStep) {
  HangPolicy p;  // derived by default
  p.floor = absl::Seconds(60);
  p.step_multiple = 10;
  Liveness l(p, {0}, clock_.Now());
  EXPECT_EQ(l.Timeout(), absl::Seconds(60));
  // Steps of 1 s: 10 s < the floor.
  for (int s = 0; s < 5; ++s) {
    l.OnReport(0, s, clock_.Now());
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(l.Timeout(), absl::Seconds(60));
  // Steps of 20 s from now on: the median moves to them.
  for (int s = 5; s < 15; ++s) {
    l.OnReport(0, s, clock_.Now());
    clock_.Advance(absl::Seconds(20));
  }
  EXPECT_EQ(l.Timeout(), absl::Seconds(200));
  EXPECT_EQ(l.SampleInterval(), absl::Seconds(5));
}

TEST_F(LivenessTest, NegativeTimeoutDisables) {
  Liveness l({HangTimeout::Off()}, {0}, clock_.Now());
  EXPECT_FALSE(l.enabled());
  clock_.Advance(absl::Hours(100));
  EXPECT_FALSE(l.Check(clock_.Now()));
}

TEST(HangTimeoutFlagTest, OffDerivedAndDurationsReadBackAsGiven) {
  EXPECT_TRUE(HangTimeout::Parse("off", "--hang-timeout")->off());
  EXPECT_TRUE(HangTimeout::Parse("OFF", "--hang-timeout")->off());
  EXPECT_TRUE(HangTimeout::Parse("0", "--hang-timeout")->derived());
  EXPECT_TRUE(HangTimeout::Parse("derived", "--hang-timeout")->derived());
  EXPECT_EQ(*HangTimeout::Parse("2s", "--hang-timeout"),
            HangTimeout::After(absl::Seconds(2)));
  EXPECT_THAT(HangTimeout::Parse("soon", "--hang-timeout").status().message(),
              ::testing::HasSubstr("--hang-timeout"));
  EXPECT_FALSE(HangTimeout::Parse("-5s", "--hang-timeout").ok());
  EXPECT_EQ(HangTimeout::Off().ToString(), "off");
  EXPECT_EQ(HangTimeout::Derived().ToString(), "derived");
  EXPECT_EQ(HangTimeout::After(absl::Seconds(90)).ToString(), "1m30s");
  // The job spec's wire form, both ways.
  for (const HangTimeout& t : {HangTimeout::Off(), HangTimeout::Derived(),
                               HangTimeout::After(absl::Minutes(7))}) {
    EXPECT_EQ(HangTimeout::FromWire(t.ToWire()), t) << t.ToString();
  }
  EXPECT_TRUE(HangTimeout::FromWire(absl::Seconds(-3)).off());
  EXPECT_TRUE(HangTimeout::FromWire(absl::ZeroDuration()).derived());
}

TEST(RealProcReaderTest, ReadsThisProcess) {
  ProcSample s = RealProcReader().Read(getpid());
  EXPECT_TRUE(s.exists);
  EXPECT_NE(s.state, 'T');
  EXPECT_GE(s.cpu_ticks, 0);
  EXPECT_FALSE(RealProcReader().Read(0x7ffffff0).exists);
}

}  // namespace
// Ranks on other nodes: the node holding the stopped rank (the culprit the
// others wait for) declares at the timeout; a node whose ranks only wait
// declares a settle time later, so the service hears the culprit's node
// first (it keeps the first verdict).
TEST_F(LivenessTest, WithOtherNodesOnlyAStoppedRankIsDeclaredAtTheTimeout) {
  HangPolicy policy;
  policy.timeout = HangTimeout::After(absl::Seconds(10));
  policy.other_nodes = true;
  // This node: rank 0, waiting in a collective on rank 1 of another node.
  Liveness waiting(policy, {0}, clock_.Now());
  // The other node: rank 1, stopped right after its last report.
  Liveness culprit(policy, {1}, clock_.Now());
  waiting.OnReport(0, 5, clock_.Now());
  culprit.OnReport(0, 5, clock_.Now());
  proc_.samples[100] = Running(10);
  clock_.Advance(absl::Milliseconds(100));
  waiting.OnSample(0, proc_.Read(100), clock_.Now());
  culprit.OnSample(0, Stopped(10), clock_.Now());
  EXPECT_EQ(waiting.SettleTime(), 2 * waiting.SampleInterval() + absl::Seconds(3));
  EXPECT_EQ(waiting.SettleTime(), absl::Seconds(5));

  clock_.Advance(absl::Milliseconds(9900));  // the timeout
  auto first = culprit.Check(clock_.Now());
  ASSERT_TRUE(first);
  EXPECT_EQ(first->rank, 1);
  EXPECT_TRUE(first->stopped);
  EXPECT_FALSE(waiting.Check(clock_.Now()));
  clock_.Advance(absl::Seconds(5) - absl::Milliseconds(1));
  EXPECT_FALSE(waiting.Check(clock_.Now()));
  clock_.Advance(absl::Milliseconds(1));
  auto late = waiting.Check(clock_.Now());
  ASSERT_TRUE(late);  // no other node spoke: this one does
  EXPECT_EQ(late->rank, 0);
  EXPECT_EQ(late->idle, absl::Seconds(15));

  // One node alone judges at the timeout, stopped rank or not.
  Liveness alone({HangTimeout::After(absl::Seconds(10))}, {0}, clock_.Now());
  EXPECT_EQ(alone.SettleTime(), absl::ZeroDuration());
  clock_.Advance(absl::Seconds(10));
  EXPECT_TRUE(alone.Check(clock_.Now()));
}

}  // namespace elastrun::launcher
