// The Daemon with several jobs on one node: each job's attempt runs, stops
// and is reported on its own, within the node's slots, and its output,
// progress and barriers go to its own job. Fake service and runner, no
// processes, no sleeps.
#include <signal.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/daemon/barrier.h"
#include "launcher/daemon/daemon.h"
#include "launcher/daemon/daemon_fakes.h"
#include "launcher/daemon/logs.h"
#include "tests/testing/subprocess.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

OutputLine Line(int rank, absl::string_view text) {
  OutputLine l;
  l.rank = rank;
  l.text = text;
  return l;
}

ProgressReport Progress(const std::string& job, int64_t step) {
  ProgressReport r;
  r.job_id = job;
  r.step = step;
  return r;
}

// A 2-slot node "b" running one-worker jobs, its output and progress wired
// to a LogForwarder and its barriers to a BarrierRelay, as elastrund does.
class DaemonJobsTest : public ::testing::Test {
 protected:
  DaemonJobsTest() {
    LogForwarderOptions lo;
    lo.node_id = "b";
    lo.thread = false;
    forwarder_ = std::make_unique<LogForwarder>(lo, &client_);
    relay_ = std::make_unique<BarrierRelay>(&client_, "b");
    DaemonOptions o;
    o.node_id = "b";
    o.log_dir = testing::MakeTempDir("daemon_jobs_test");
    o.slots = 2;
    o.on_output_line = [this](const std::string& job, int64_t round, const OutputLine& l) {
      forwarder_->OnLine(job, round, l);
    };
    o.on_progress = [this](const std::string& job, int64_t round, const ProgressReport& r) {
      forwarder_->OnProgress(job, round, r);
    };
    o.on_barrier = [this](const std::string& job, int64_t round, const BarrierArrival& a,
                          std::function<void(const absl::Status&)> reply) {
      relay_->OnArrival(job, round, a, std::move(reply));
    };
    o.on_attempt_start = [this](const std::string& job, int64_t round) {
      relay_->SetAttempt(job, round);
    };
    daemon_ = std::make_unique<Daemon>(o, &client_, &runner_);
    runner_.after_finish = [this] { Settle(*daemon_); };
  }

  // One Watch command, then its service calls.
  void Do(const v1::Command& command) {
    daemon_->OnCommand(command);
    Settle(*daemon_);
  }

  // Joins and starts one-worker job `job` at `round`; returns its attempt id.
  uint64_t Run(const std::string& job, int64_t round) {
    Do(Join(job, round, 1));
    Do(Start(job, round, 1));
    EXPECT_FALSE(runner_.started.empty());
    return runner_.started.empty() ? 0 : runner_.started.back().id;
  }

  std::vector<std::pair<std::string, int64_t>> RunningNow() const {
    std::vector<std::pair<std::string, int64_t>> out;
    for (const v1::RunningAttempt& a : daemon_->Running()) out.emplace_back(a.job_id(), a.round());
    return out;
  }

  FakeClient client_;
  FakeRunner runner_;
  std::unique_ptr<LogForwarder> forwarder_;
  std::unique_ptr<BarrierRelay> relay_;
  std::unique_ptr<Daemon> daemon_;
};

using JobRound = std::pair<std::string, int64_t>;

TEST_F(DaemonJobsTest, TwoJobsRunAtOnceAndEachEndIsReportedWithItsJob) {
  const uint64_t a = Run("job-a", 0);
  const uint64_t b = Run("job-b", 3);
  EXPECT_EQ(client_.joins.size(), 2u);
  EXPECT_THAT(runner_.active, UnorderedElementsAre(a, b));
  EXPECT_THAT(RunningNow(), UnorderedElementsAre(JobRound("job-a", 0), JobRound("job-b", 3)));
  EXPECT_THAT(runner_.stops, IsEmpty());

  runner_.Finish(b, Succeeded());
  ASSERT_EQ(client_.reports.size(), 1u);
  EXPECT_EQ(client_.reports[0].job_id(), "job-b");
  EXPECT_EQ(client_.reports[0].round(), 3);
  EXPECT_TRUE(client_.reports[0].succeeded());
  EXPECT_THAT(RunningNow(), ElementsAre(JobRound("job-a", 0)));
  EXPECT_FALSE(daemon_->WaitIdle(absl::ZeroDuration())) << "job-a still runs";

  runner_.Finish(a, Succeeded());
  ASSERT_EQ(client_.reports.size(), 2u);
  EXPECT_EQ(client_.reports[1].job_id(), "job-a");
  EXPECT_EQ(client_.reports[1].round(), 0);
  EXPECT_TRUE(daemon_->WaitIdle(absl::ZeroDuration()));
}

TEST_F(DaemonJobsTest, AFailureOfOneJobDoesNotStopTheOther) {
  const uint64_t a = Run("job-a", 0);
  const uint64_t b = Run("job-b", 0);
  runner_.Finish(a, Killed(0, SIGKILL));
  ASSERT_EQ(client_.reports.size(), 1u);
  EXPECT_EQ(client_.reports[0].job_id(), "job-a");
  EXPECT_EQ(client_.reports[0].failure().signal(), SIGKILL);
  EXPECT_THAT(runner_.stops, IsEmpty());
  // job-a's next round runs beside job-b, which is never touched.
  const uint64_t a1 = Run("job-a", 1);
  EXPECT_NE(a1, a);
  EXPECT_THAT(runner_.active, UnorderedElementsAre(a1, b));
  EXPECT_THAT(runner_.stops, IsEmpty());
  EXPECT_THAT(RunningNow(), UnorderedElementsAre(JobRound("job-a", 1), JobRound("job-b", 0)));
}

TEST_F(DaemonJobsTest, StopAndEndJobOfOneJobLeaveTheOtherRunning) {
  const uint64_t a = Run("job-a", 0);
  const uint64_t b = Run("job-b", 0);
  Do(Stop("job-a", 0));
  EXPECT_THAT(runner_.stopped_ids(), ElementsAre(a));
  runner_.Finish(a, Stopped());
  EXPECT_THAT(client_.reports, IsEmpty());
  const uint64_t a1 = Run("job-a", 1);
  Do(End("job-a"));
  EXPECT_THAT(runner_.stopped_ids(), ElementsAre(a, a1));
  runner_.Finish(a1, Stopped());
  EXPECT_THAT(client_.reports, IsEmpty());
  EXPECT_THAT(RunningNow(), ElementsAre(JobRound("job-b", 0)));
  runner_.Finish(b, Succeeded());
  ASSERT_EQ(client_.reports.size(), 1u);
  EXPECT_EQ(client_.reports[0].job_id(), "job-b");
}

TEST_F(DaemonJobsTest, AJobBeyondTheSlotsIsNotJoinedNorStarted) {
  const uint64_t a = Run("job-a", 0);
  const uint64_t b = Run("job-b", 0);
  Do(Join("job-c", 0, 1));
  EXPECT_EQ(client_.joins.size(), 2u) << "job-c was joined on a full node";
  // A StartAttempt anyway (the service erred): refused, reported as a
  // failure of its round that names the jobs holding the slots.
  Do(Start("job-c", 0, 1));
  EXPECT_EQ(runner_.started.size(), 2u);
  ASSERT_EQ(client_.reports.size(), 1u);
  EXPECT_EQ(client_.reports[0].job_id(), "job-c");
  EXPECT_THAT(client_.reports[0].failure().message(), HasSubstr("job job-a"));
  EXPECT_THAT(client_.reports[0].failure().message(), HasSubstr("job job-b"));
  EXPECT_THAT(runner_.stops, IsEmpty());
  EXPECT_THAT(runner_.active, UnorderedElementsAre(a, b));
  // Once job-b ended, job-c fits.
  runner_.Finish(b, Succeeded());
  Do(End("job-b"));
  Run("job-c", 1);
  EXPECT_THAT(RunningNow(), UnorderedElementsAre(JobRound("job-a", 0), JobRound("job-c", 1)));
}

TEST_F(DaemonJobsTest, JoinsHoldSlotsUntilTheirAttemptStarts) {
  Do(Join("job-a", 0, 1));
  Do(Join("job-b", 0, 1));
  Do(Join("job-c", 0, 1));  // a and b hold both slots
  ASSERT_EQ(client_.joins.size(), 2u);
  EXPECT_EQ(client_.joins[1].job_id(), "job-b");
  // A lost EndJob must not hold slots for good: re-registering frees them
  // (the service re-sends the joins it still wants).
  daemon_->ForgetJoins();
  Do(Join("job-c", 0, 1));
  EXPECT_EQ(client_.joins.size(), 3u);
}

TEST_F(DaemonJobsTest, AStartWaitsForAnotherJobsAttemptBeingStopped) {
  Do(Start("job-a", 0, 2));  // both slots
  const uint64_t a = runner_.started.back().id;
  Do(End("job-a"));
  // Its workers still wind down, but the service already placed job-b.
  Do(Join("job-b", 0, 2));
  EXPECT_EQ(client_.joins.size(), 1u);
  Do(Start("job-b", 0, 2));
  EXPECT_EQ(runner_.started.size(), 1u) << "started while job-a still holds the slots";
  runner_.Finish(a, Stopped());
  ASSERT_EQ(runner_.started.size(), 2u);
  EXPECT_THAT(RunningNow(), ElementsAre(JobRound("job-b", 0)));
  EXPECT_THAT(client_.reports, IsEmpty());
}

TEST_F(DaemonJobsTest, ShutdownStopsEveryJobAndWaitIdleWaitsForAll) {
  const uint64_t a = Run("job-a", 0);
  const uint64_t b = Run("job-b", 0);
  daemon_->Shutdown(SIGTERM);
  EXPECT_THAT(runner_.stopped_ids(), UnorderedElementsAre(a, b));
  runner_.Finish(a, Stopped());
  EXPECT_FALSE(daemon_->WaitIdle(absl::ZeroDuration()));
  runner_.Finish(b, Stopped());
  EXPECT_TRUE(daemon_->WaitIdle(absl::ZeroDuration()));
  EXPECT_THAT(client_.reports, IsEmpty());
}

TEST_F(DaemonJobsTest, OutputAndProgressGoToTheirOwnJob) {
  Run("job-a", 0);
  const uint64_t b = Run("job-b", 2);
  // The agent calls each attempt's own hook.
  runner_.started[0].spec.on_output_line(Line(1, "from a"));
  runner_.started[1].spec.on_output_line(Line(1, "from b"));
  daemon_->OnProgress(Progress("job-a", 10));
  daemon_->OnProgress(Progress("job-b", 20));
  daemon_->OnProgress(Progress("job-z", 30));  // not here: dropped
  daemon_->OnProgress(Progress("", 40));       // no job, two running: dropped
  forwarder_->Flush();

  ASSERT_EQ(client_.pushes.size(), 2u);
  std::map<std::string, std::string> lines;
  for (const v1::PushLogsRequest& p : client_.pushes) {
    ASSERT_EQ(p.chunks_size(), 1);
    lines[p.job_id()] = absl::StrCat(p.chunks(0).round(), ":", p.chunks(0).data());
  }
  EXPECT_EQ(lines["job-a"], "0:from a\n");
  EXPECT_EQ(lines["job-b"], "2:from b\n");
  std::map<std::string, std::pair<int64_t, int64_t>> progress;  // job -> round, step
  for (const v1::ReportProgressRequest& r : client_.progress) {
    progress[r.job_id()] = {r.progress().round(), r.progress().step()};
  }
  EXPECT_EQ(progress.size(), 2u);
  EXPECT_EQ(progress["job-a"], std::make_pair(int64_t{0}, int64_t{10}));
  EXPECT_EQ(progress["job-b"], std::make_pair(int64_t{2}, int64_t{20}));

  // With one job left, a report without a job (an older worker) is its.
  runner_.Finish(b, Succeeded());
  client_.progress.clear();
  daemon_->OnProgress(Progress("", 50));
  forwarder_->Flush();
  ASSERT_EQ(client_.progress.size(), 1u);
  EXPECT_EQ(client_.progress[0].job_id(), "job-a");
  EXPECT_EQ(client_.progress[0].progress().step(), 50);
}

TEST_F(DaemonJobsTest, BarriersMeetPerJobAndAnUnknownJobIsRefused) {
  Run("job-a", 0);
  Run("job-b", 5);
  absl::Mutex mu;
  std::map<std::string, absl::Status> answers;  // by job
  absl::Notification both;
  auto reply_for = [&](const std::string& job) {
    return [&, job](const absl::Status& st) {
      absl::MutexLock lock(&mu);
      answers[job] = st;
      if (answers.count("job-a") && answers.count("job-b")) both.Notify();
    };
  };
  BarrierArrival arrival;
  arrival.name = "sync";
  arrival.local_world_size = 1;
  absl::Status unknown;
  arrival.job_id = "job-z";
  daemon_->OnBarrier(arrival, [&](const absl::Status& st) { unknown = st; });
  EXPECT_TRUE(absl::IsFailedPrecondition(unknown)) << unknown;
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("job-z"));
  for (const char* job : {"job-a", "job-b"}) {
    arrival.job_id = job;
    daemon_->OnBarrier(arrival, reply_for(job));
  }
  ASSERT_TRUE(both.WaitForNotificationWithTimeout(absl::Seconds(60)));
  absl::MutexLock lock(&client_.mu_);
  std::vector<JobRound> called;
  for (const v1::BarrierRequest& r : client_.barriers) called.emplace_back(r.job_id(), r.round());
  EXPECT_THAT(called, UnorderedElementsAre(JobRound("job-a", 0), JobRound("job-b", 5)));
  absl::MutexLock answers_lock(&mu);
  EXPECT_TRUE(answers["job-a"].ok() && answers["job-b"].ok());
}

// The service is slow to answer one job's JoinRound (its disk slow, a lock
// held): the Watch stream's next command, another job's, is acted on
// meanwhile. The call was made on the command thread, and every job of the
// node waited for it (up to 3 tries of 5 s each).
TEST_F(DaemonJobsTest, ASlowJoinRoundHoldsUpNoOtherJob) {
  client_.Hold("job-slow");
  absl::Notification other_started;
  // The Watch stream's thread: one command after the other, as the session
  // feeds them.
  std::thread watch([&] {
    daemon_->OnCommand(Join("job-slow", 0, 1));
    daemon_->OnCommand(Start("job-other", 0, 1));
    other_started.Notify();
  });
  // No ASSERT before the join: a joinable thread left behind would abort
  // the test binary instead of failing this test.
  const bool held = client_.held.WaitForNotificationWithTimeout(absl::Seconds(60));
  const bool started = other_started.WaitForNotificationWithTimeout(absl::Seconds(20));
  client_.Release();
  watch.join();
  ASSERT_TRUE(held) << "the service never got job-slow's call";
  EXPECT_TRUE(started) << "job-other's StartAttempt waited for job-slow's JoinRound";
  Settle(*daemon_);
  ASSERT_EQ(runner_.started.size(), 1u);
  EXPECT_EQ(runner_.started[0].spec.job_id, "job-other");
  ASSERT_EQ(client_.joins.size(), 1u);
  EXPECT_EQ(client_.joins[0].job_id(), "job-slow");
}

// The service is slow to take one job's exit report: the end of another
// job's attempt, on the same runner thread, is handled meanwhile and its
// next round starts. The report was sent on the runner's callback thread,
// so every attempt's end (and every queued start) waited behind it.
TEST_F(DaemonJobsTest, ASlowExitReportHoldsUpNoOtherAttemptsEnd) {
  const uint64_t slow = Run("job-slow", 0);
  const uint64_t other = Run("job-other", 0);
  Do(Start("job-other", 1, 1));  // stops round 0, starts when it has ended
  ASSERT_EQ(runner_.stopped_ids(), std::vector<uint64_t>{other});
  client_.Hold("job-slow");
  runner_.after_finish = nullptr;
  absl::Notification both_ended;
  // The runner's callback thread: one attempt's end after the other.
  std::thread callbacks([&] {
    runner_.Finish(slow, Killed(0, SIGKILL));
    runner_.Finish(other, Stopped());
    both_ended.Notify();
  });
  // No ASSERT before the join: a joinable thread left behind would abort
  // the test binary instead of failing this test.
  const bool held = client_.held.WaitForNotificationWithTimeout(absl::Seconds(60));
  const bool ended = both_ended.WaitForNotificationWithTimeout(absl::Seconds(20));
  client_.Release();
  callbacks.join();
  ASSERT_TRUE(held) << "the service never got job-slow's call";
  EXPECT_TRUE(ended) << "job-other's attempt end waited for job-slow's ReportExit";
  Settle(*daemon_);
  ASSERT_EQ(runner_.started.size(), 3u);
  EXPECT_EQ(runner_.started[2].spec.job_id, "job-other");
  ASSERT_EQ(client_.reports.size(), 1u);
  EXPECT_EQ(client_.reports[0].job_id(), "job-slow");
  EXPECT_EQ(client_.reports[0].failure().signal(), SIGKILL);
}

}  // namespace
}  // namespace elastrun::launcher
