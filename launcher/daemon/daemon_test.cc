// The Daemon's command handling with a fake service client and a fake
// runner: no processes, no gRPC, no sleeps. Tests decide when each attempt
// ends and what the service answers.
#include "launcher/daemon/daemon.h"

#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <functional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/daemon/barrier.h"
#include "launcher/daemon/daemon_fakes.h"
#include "launcher/daemon/logs.h"
#include "launcher/daemon/session.h"
#include "tests/testing/subprocess.h"

namespace elastrun::launcher {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;

class DaemonTest : public ::testing::Test {
 protected:
  DaemonTest() {
    DaemonOptions o;
    o.node_id = "b";
    o.log_dir = testing::MakeTempDir("daemon_test");
    o.base_env = {"PATH=/usr/bin", "RANK=99"};
    o.slots = 2;
    log_dir_ = o.log_dir;
    daemon_ = std::make_unique<Daemon>(o, &client_, &runner_);
    runner_.after_finish = [this] { Settle(*daemon_); };
  }

  // One Watch command, then its service calls.
  void Do(const v1::Command& command) {
    daemon_->OnCommand(command);
    Settle(*daemon_);
  }

  FakeClient client_;
  FakeRunner runner_;
  std::string log_dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DaemonTest, JoinReservesAPortAndJoins) {
  Do(Join("j-1", 0));
  ASSERT_EQ(client_.joins.size(), 1u);
  const v1::JoinRoundRequest r = client_.joins[0];  // a copy: the next join grows the vector
  EXPECT_EQ(r.job_id(), "j-1");
  EXPECT_EQ(r.round(), 0);
  EXPECT_EQ(r.node_id(), "b");
  EXPECT_EQ(r.local_world_size(), 2);
  EXPECT_GT(r.master_port(), 0);
  EXPECT_FALSE(r.has_group_rank());  // any (DaemonOptions::group_rank unset)
  Do(Join("j-1", 1));
  ASSERT_EQ(client_.joins.size(), 2u);
  EXPECT_NE(client_.joins[1].master_port(), r.master_port()) << "a recent port is reused";
}

TEST_F(DaemonTest, StartRunsTheAssignmentOnceAndReportsSuccess) {
  Do(Start("j-1", 0));
  Do(Start("j-1", 0));  // a re-sent command: a no-op
  ASSERT_EQ(runner_.started.size(), 1u);
  const AttemptSpec& spec = runner_.started[0].spec;
  ASSERT_EQ(spec.workers.size(), 2u);
  EXPECT_THAT(spec.workers[1].process.argv, ElementsAre("worker", "--flag"));
  const std::vector<std::string>& env = spec.workers[1].process.env;
  for (const char* e : {"RANK=3", "LOCAL_RANK=1", "WORLD_SIZE=4", "GROUP_RANK=1",
                        "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "EXTRA=1",
                        "TORCHELASTIC_MAX_RESTARTS=3", "TORCHELASTIC_RUN_ID=j-1"}) {
    EXPECT_THAT(env, Contains(e));
  }
  EXPECT_EQ(spec.outputs[1].stdout_log, log_dir_ + "/j-1/attempt_0/1/stdout.log");
  EXPECT_TRUE(testing::FileExists(log_dir_ + "/j-1/attempt_0/1"));
  EXPECT_EQ(daemon_->Running().size(), 1u);

  runner_.Finish(Succeeded());
  ASSERT_EQ(client_.reports.size(), 1u);
  EXPECT_TRUE(client_.reports[0].succeeded());
  EXPECT_EQ(client_.reports[0].round(), 0);
  EXPECT_THAT(daemon_->Running(), IsEmpty());
  // The service re-sends the attempt before it took the report: never twice.
  Do(Start("j-1", 0));
  EXPECT_EQ(runner_.started.size(), 1u);
}

// The record of attempts that ran stays bounded on a node that runs job
// after job, and still refuses a re-sent round of a job it remembers.
TEST(DaemonRanRecordTest, KeepsTheNewestJobsAndRefusesTheirOldRounds) {
  DaemonOptions o;
  o.node_id = "b";
  o.log_dir = testing::MakeTempDir("daemon_ran");
  o.slots = 2;
  o.ran_jobs_kept = 3;
  FakeClient client;
  FakeRunner runner;
  Daemon daemon(o, &client, &runner);
  for (int i = 1; i <= 10; ++i) {
    daemon.OnCommand(Start(absl::StrCat("j-", i), 0));
    runner.Finish(Succeeded());
  }
  EXPECT_EQ(runner.started.size(), 10u);
  EXPECT_EQ(daemon.RanJobsRecorded(), 3u);
  // j-10 ran round 0, then round 1: both re-sent, neither runs again.
  daemon.OnCommand(Start("j-10", 1));
  runner.Finish(Succeeded());
  EXPECT_EQ(runner.started.size(), 11u);
  daemon.OnCommand(Start("j-10", 0));
  daemon.OnCommand(Start("j-10", 1));
  EXPECT_EQ(runner.started.size(), 11u);
  EXPECT_EQ(daemon.RanJobsRecorded(), 3u);
}

TEST_F(DaemonTest, FirstFailureIsReportedWithRankAndSignal) {
  Do(Start("j-1", 0));
  runner_.Finish(Killed(3, SIGKILL));
  ASSERT_EQ(client_.reports.size(), 1u);
  const v1::WorkerFailure& f = client_.reports[0].failure();
  EXPECT_EQ(f.rank(), 3);
  EXPECT_EQ(f.local_rank(), 1);
  EXPECT_EQ(f.signal(), SIGKILL);
  EXPECT_EQ(f.node_id(), "b");
}

TEST_F(DaemonTest, StopAttemptStopsWithoutReportThenNextRoundRuns) {
  Do(Start("j-1", 0));
  Do(Stop("j-1", 0));
  Do(Stop("j-1", 0));  // idempotent
  ASSERT_EQ(runner_.stops.size(), 1u);
  EXPECT_EQ(runner_.stops[0], std::make_pair(runner_.started[0].id, SIGTERM));
  runner_.Finish(Stopped());
  EXPECT_THAT(client_.reports, IsEmpty());
  Do(Join("j-1", 1));
  Do(Start("j-1", 1));
  ASSERT_EQ(runner_.started.size(), 2u);
  EXPECT_THAT(runner_.started[1].spec.workers[0].process.env,
              Contains("TORCHELASTIC_RESTART_COUNT=1"));
}

// A job's end runs hooks (its logs are complete) after the attempt left
// the Daemon's books: the Daemon is not idle, and may not be destroyed,
// until they are done (a daemon stopped by SIGTERM crashed in its exit).
TEST(DaemonIdleTest, NotIdleUntilAnAttemptsEndIsHandled) {
  FakeClient client;
  FakeRunner runner;
  absl::Notification in_hook, release;
  std::vector<std::string> done_jobs;
  DaemonOptions o;
  o.node_id = "b";
  o.log_dir = testing::MakeTempDir("daemon_idle_test");
  o.slots = 2;
  o.on_job_done = [&](const std::string& job) {
    done_jobs.push_back(job);
    in_hook.Notify();
    release.WaitForNotification();
  };
  Daemon daemon(o, &client, &runner);
  daemon.OnCommand(Start("j-1", 0));
  daemon.OnCommand(End("j-1"));  // stops the attempt; it ends below
  std::thread ending([&] { runner.Finish(Stopped()); });
  in_hook.WaitForNotification();
  EXPECT_FALSE(daemon.WaitIdle(absl::Milliseconds(50)));
  release.Notify();
  EXPECT_TRUE(daemon.WaitIdle(absl::Seconds(60)));
  ending.join();
  EXPECT_THAT(done_jobs, ElementsAre("j-1"));
}

TEST_F(DaemonTest, NewRoundWhileOldStillRunsStopsItThenStarts) {
  Do(Start("j-1", 0));
  // The StopAttempt was lost (service restart): the join of round 1 stops
  // round 0, and round 1 starts only once round 0 has ended.
  Do(Join("j-1", 1));
  EXPECT_EQ(runner_.stops.size(), 1u);
  Do(Start("j-1", 1));
  EXPECT_EQ(runner_.started.size(), 1u);
  runner_.Finish(Stopped());
  ASSERT_EQ(runner_.started.size(), 2u);
  EXPECT_THAT(runner_.started[1].spec.workers[0].process.env, Contains("ELASTRUN_ROUND=1"));
  EXPECT_THAT(client_.reports, IsEmpty());
}

// A RunningAttempt of `job` round `round` that ended here, its report
// not taken yet.
MATCHER_P2(EndedAttempt, job, round, "") {
  return arg.job_id() == job && arg.round() == round && arg.ended();
}

// An EndJob may come from a service that could not store the job's end
// (a full disk): the node keeps the report it could not deliver, lists the
// round as ended when it registers again, and sends it until it is taken.
TEST_F(DaemonTest, EndJobStopsTheJobAndKeepsItsUndeliveredReports) {
  Do(Start("j-1", 0));
  client_.report_status = absl::UnavailableError("disk full");
  runner_.Finish(Killed(2, SIGABRT));
  EXPECT_EQ(daemon_->pending_reports(), 1u);
  Do(Start("j-1", 1));
  Do(End("j-1"));
  EXPECT_EQ(daemon_->pending_reports(), 1u);
  EXPECT_EQ(runner_.stops.size(), 1u);
  EXPECT_THAT(daemon_->Running(), ElementsAre(EndedAttempt("j-1", 0)));
  client_.report_status = absl::OkStatus();
  daemon_->SendReports();
  Settle(*daemon_);
  EXPECT_EQ(daemon_->pending_reports(), 0u);
  runner_.Finish(Stopped());
  // Another job runs on the free node.
  Do(Start("j-2", 0));
  EXPECT_EQ(runner_.started.size(), 3u);
  runner_.Finish(Succeeded());
  // The service may place the node on the first job again, in a new round.
  client_.report_status = absl::OkStatus();
  Do(Join("j-1", 5));
  EXPECT_EQ(client_.joins.size(), 1u);
}

TEST_F(DaemonTest, BusyNodeDoesNotJoinAnotherJob) {
  Do(Start("j-1", 0));
  Do(Join("j-2", 0));
  EXPECT_THAT(client_.joins, IsEmpty());
  EXPECT_THAT(runner_.stops, IsEmpty());
}

TEST_F(DaemonTest, ReportsAreKeptWhileTheServiceIsAway) {
  Do(Start("j-1", 0));
  client_.report_status = absl::UnavailableError("away");
  runner_.Finish(Succeeded());
  EXPECT_EQ(daemon_->pending_reports(), 1u);
  client_.report_status = absl::OkStatus();
  daemon_->SendReports();
  Settle(*daemon_);
  EXPECT_EQ(daemon_->pending_reports(), 0u);
  ASSERT_EQ(client_.reports.size(), 1u);
  // Refused for good (a stale round): dropped, not retried forever.
  Do(Start("j-1", 1));
  client_.report_status = absl::FailedPreconditionError("stale");
  runner_.Finish(Killed(2, SIGSEGV));
  EXPECT_EQ(daemon_->pending_reports(), 0u);
}

// A restarted service learns from RegisterNode which rounds the node still
// holds: an attempt whose end is not reported yet counts (marked ended), so
// the service waits for the report instead of taking the node as lost.
TEST_F(DaemonTest, RunningListsAnEndedAttemptWhoseReportIsQueued) {
  Do(Start("j-1", 0));
  ASSERT_EQ(daemon_->Running().size(), 1u);
  EXPECT_FALSE(daemon_->Running()[0].ended());
  client_.report_status = absl::UnavailableError("away");
  runner_.Finish(Succeeded());
  EXPECT_THAT(daemon_->Running(), ElementsAre(EndedAttempt("j-1", 0)));
  client_.report_status = absl::OkStatus();
  daemon_->SendReports();
  Settle(*daemon_);
  EXPECT_THAT(daemon_->Running(), IsEmpty());
}

TEST_F(DaemonTest, ShutdownStopsWithTheSignalAndStartsNothing) {
  Do(Start("j-1", 0));
  daemon_->Shutdown(SIGINT);
  ASSERT_EQ(runner_.stops.size(), 1u);
  EXPECT_EQ(runner_.stops[0].second, SIGINT);
  EXPECT_FALSE(daemon_->WaitIdle(absl::ZeroDuration()));
  runner_.Finish(Stopped());
  EXPECT_TRUE(daemon_->WaitIdle(absl::ZeroDuration()));
  EXPECT_THAT(client_.reports, IsEmpty());
  Do(Start("j-1", 1));
  EXPECT_EQ(runner_.started.size(), 1u);
}

TEST_F(DaemonTest, LogFolderThatCannotBeMadeIsReportedAsAFailure) {
  DaemonOptions o;
  o.node_id = "b";
  o.log_dir = "/proc/no-such-place";
  o.slots = 2;
  Daemon d(o, &client_, &runner_);
  d.OnCommand(Start("j-1", 0));
  Settle(d);
  EXPECT_THAT(runner_.started, IsEmpty());
  ASSERT_EQ(client_.reports.size(), 1u);
  EXPECT_EQ(client_.reports[0].failure().exit_code(), 127);
  EXPECT_THAT(client_.reports[0].failure().message(), ::testing::HasSubstr("/proc"));
}

TEST_F(DaemonTest, AttemptRunsInTheJobsFolderAsItsOwnerWithFreshLogs) {
  v1::Command c = Start("j-1", 0);
  v1::JobSpec* spec = c.mutable_start()->mutable_spec();
  spec->set_working_dir("/");
  spec->set_replace_env(true);
  const bool root = geteuid() == 0 && getpwuid(65534) != nullptr;
  if (root) {
    spec->mutable_owner()->set_uid(65534);
    spec->mutable_owner()->set_gid(65534);
  }
  Do(c);
  ASSERT_EQ(runner_.started.size(), 1u) << client_.reports.size();
  const AttemptSpec& a = runner_.started[0].spec;
  EXPECT_TRUE(a.new_log_files);
  EXPECT_EQ(a.standby_cwd, "/");
  for (const WorkerSpec& w : a.workers) {
    EXPECT_EQ(w.process.cwd, "/");
    EXPECT_EQ(w.process.run_as.has_value(), root);
    EXPECT_EQ(a.standby_run_as.has_value(), root);
    if (root) {
      EXPECT_EQ(w.process.run_as->uid, 65534u);
    }
    // replace_env: the spec's environment only (and the contract's).
    EXPECT_THAT(w.process.env, Contains("EXTRA=1"));
    EXPECT_THAT(w.process.env, Not(Contains("PATH=/usr/bin")));
  }
}

TEST_F(DaemonTest, AttemptOfAnUnknownOwnerOrMissingFolderCannotStart) {
  v1::Command c = Start("j-1", 0);
  c.mutable_start()->mutable_spec()->set_working_dir("/nonexistent/project");
  Do(c);
  EXPECT_THAT(runner_.started, IsEmpty());
  ASSERT_EQ(client_.reports.size(), 1u);
  EXPECT_THAT(
      client_.reports[0].failure().message(),
      ::testing::HasSubstr("working folder /nonexistent/project of job j-1 is missing "
                           "on node b"));
}

TEST_F(DaemonTest, AttemptStartIsAnnouncedWithJobAndRound) {
  DaemonOptions o;
  o.node_id = "b";
  o.log_dir = log_dir_;
  o.slots = 2;
  std::vector<std::pair<std::string, int64_t>> announced;
  o.on_attempt_start = [&](const std::string& job, int64_t round) {
    announced.emplace_back(job, round);
  };
  Daemon d(o, &client_, &runner_);
  d.OnCommand(Start("j-1", 3));
  EXPECT_THAT(announced, ElementsAre(std::make_pair(std::string("j-1"), int64_t{3})));
}

OutputLine Line(int rank, bool is_stderr, absl::string_view text) {
  OutputLine l;
  l.rank = rank;
  l.local_rank = rank % 2;
  l.is_stderr = is_stderr;
  l.text = text;
  return l;
}

// Options of a forwarder without a thread (the test flushes), numbered as
// node "b" incarnation "inc".
LogForwarderOptions ForwarderOptions() {
  LogForwarderOptions o;
  o.node_id = "b";
  o.incarnation = "inc";
  o.thread = false;
  return o;
}

TEST(LogForwarderTest, LinesAreBatchedPerRankAndStream) {
  FakeClient client;
  LogForwarderOptions o;
  o.node_id = "b";
  o.thread = false;
  LogForwarder f(o, &client);
  f.OnLine("j-1", 2, Line(2, false, "a"));
  f.OnLine("j-1", 2, Line(2, false, "b"));
  f.OnLine("j-1", 2, Line(3, true, "c"));
  f.Flush();
  ASSERT_EQ(client.pushes.size(), 1u);
  const v1::PushLogsRequest& r = client.pushes[0];
  EXPECT_EQ(r.node_id(), "b");
  EXPECT_EQ(r.job_id(), "j-1");
  ASSERT_EQ(r.chunks_size(), 2);
  EXPECT_EQ(r.chunks(0).round(), 2);
  EXPECT_EQ(r.chunks(0).rank(), 2);
  EXPECT_EQ(r.chunks(0).stream(), "stdout");
  EXPECT_EQ(r.chunks(0).data(), "a\nb\n");
  EXPECT_EQ(r.chunks(1).stream(), "stderr");
  EXPECT_EQ(r.chunks(1).data(), "c\n");
  f.Flush();  // nothing new: no call
  EXPECT_EQ(client.pushes.size(), 1u);
}

// A job that ended here: its last-lines mark follows its lines, after they
// were taken, and is sent again while the service is away.
TEST(LogForwarderTest, AJobsLastMarkFollowsItsLines) {
  FakeClient client;
  LogForwarderOptions o = ForwarderOptions();
  LogForwarder f(o, &client);
  f.OnLine("j-1", 0, Line(2, false, "bye"));
  f.JobDone("j-1");
  f.OnLine("k-2", 0, Line(2, false, "other job"));
  client.push_status = absl::UnavailableError("away");
  f.Flush();
  client.push_status = absl::OkStatus();
  f.Flush();
  ASSERT_EQ(client.pushes.size(), 3u);
  EXPECT_EQ(client.pushes[0].job_id(), "j-1");
  EXPECT_EQ(client.pushes[0].chunks(0).data(), "bye\n");
  EXPECT_FALSE(client.pushes[0].last());
  EXPECT_EQ(client.pushes[1].job_id(), "j-1");
  EXPECT_TRUE(client.pushes[1].last());
  EXPECT_EQ(client.pushes[1].chunks_size(), 0);
  EXPECT_EQ(client.pushes[2].job_id(), "k-2");
  EXPECT_FALSE(client.pushes[2].last());
  EXPECT_EQ(client.pushes[2].chunks(0).data(), "other job\n");
}

// A flush (the one before an exit report) while another push is in flight
// waits for it, then sends what came meanwhile: the service has every line
// before the report that ends the job (`logs -f` of a failed job missed the
// last lines of the other nodes).
TEST(LogForwarderTest, AFlushDuringAPushInFlightWaitsAndSendsTheRest) {
  class SlowFirstPush : public FakeClient {
   public:
    absl::Status PushLogs(const v1::PushLogsRequest& request) override {
      if (first_.exchange(false)) {
        in_flight.Notify();
        release.WaitForNotification();
      }
      return FakeClient::PushLogs(request);
    }
    absl::Notification in_flight, release;

   private:
    std::atomic<bool> first_{true};
  };
  SlowFirstPush client;
  LogForwarderOptions o;
  o.node_id = "b";
  o.thread = false;
  LogForwarder f(o, &client);
  f.OnLine("j-1", 0, Line(0, false, "first"));
  std::thread background([&] { f.Flush(); });  // the forwarder's own push
  ASSERT_TRUE(client.in_flight.WaitForNotificationWithTimeout(absl::Seconds(60)));
  f.OnLine("j-1", 0, Line(1, false, "last words"));
  std::thread before_report([&] { f.Flush(); });
  client.release.Notify();
  background.join();
  before_report.join();  // returned: every line is with the service
  std::string sent;
  for (const v1::PushLogsRequest& r : client.pushes) {
    for (const v1::LogChunk& c : r.chunks()) sent += c.data();
  }
  EXPECT_EQ(sent, "first\nlast words\n");
}

// A service that cannot take lines for a while (its disk full) gets every
// one of them afterwards, in order and once: what does not fit the buffer
// waits in the spill file (the buffer dropped all but its last 64 KiB
// before), then the job's last mark.
TEST(LogForwarderTest, LinesBeyondTheBufferWaitInTheSpillFileAndAllArrive) {
  FakeClient client;
  LogForwarderOptions o = ForwarderOptions();
  o.max_buffered_bytes = 64 << 10;
  o.spill_path = testing::MakeTempDir("log_spill") + "/spill";
  LogForwarder f(o, &client);
  client.push_status = absl::UnavailableError("disk full");
  const std::string pad(90, 'x');
  constexpr int kLines = 30000;  // ~3 MiB, 47 times the buffer
  for (int i = 0; i < kLines; ++i) {
    // Two ranks and both streams: chunks change as they would.
    f.OnLine("j-1", 0, Line(i % 7 == 0 ? 1 : 0, i % 11 == 0, absl::StrCat(i, " ", pad)));
    if (i % 5000 == 0) f.Flush();  // refused: kept
  }
  f.JobDone("j-1");
  EXPECT_GT(f.spilled_bytes(), 2 << 20);
  f.Flush();
  EXPECT_TRUE(client.pushes.empty());
  client.push_status = absl::OkStatus();
  for (int i = 0; i < 1000 && (f.spilled_bytes() > 0 || client.pushes.empty() ||
                               !client.pushes.back().last());
       ++i) {
    f.Flush();
  }
  EXPECT_EQ(f.dropped_lines(), 0);
  EXPECT_EQ(f.spilled_bytes(), 0);
  std::vector<int> seen;
  int64_t next_number = 1;
  bool last = false;
  for (const v1::PushLogsRequest& r : client.pushes) {
    EXPECT_FALSE(last) << "a push after the last mark";
    last = r.last();
    if (last) continue;
    // Numbered one after another: the service stores each chunk once.
    EXPECT_EQ(r.first_chunk(), next_number);
    next_number += r.chunks_size();
    for (const v1::LogChunk& c : r.chunks()) {
      for (absl::string_view line : absl::StrSplit(c.data(), '\n', absl::SkipEmpty())) {
        int n = -1;
        ASSERT_TRUE(absl::SimpleAtoi(line.substr(0, line.find(' ')), &n)) << line;
        EXPECT_EQ(c.rank(), n % 7 == 0 ? 1 : 0);
        EXPECT_EQ(c.stream(), n % 11 == 0 ? "stderr" : "stdout");
        seen.push_back(n);
      }
    }
  }
  EXPECT_TRUE(last);
  ASSERT_EQ(seen.size(), static_cast<size_t>(kLines));
  for (int i = 0; i < kLines; ++i) ASSERT_EQ(seen[i], i);
  // The buffer is in use again once the file is through: a new line goes
  // straight out.
  f.OnLine("j-2", 0, Line(0, false, "after"));
  f.Flush();
  EXPECT_EQ(client.pushes.back().chunks(0).data(), "after\n");
}

TEST(BarrierRelayTest, LocalWorkersMeetThenTheNodeArrivesOnce) {
  FakeClient client;
  absl::Notification both_answered;
  std::vector<absl::Status> answers;
  absl::Mutex mu;
  auto reply = [&](const absl::Status& st) {
    absl::MutexLock lock(&mu);
    answers.push_back(st);
    if (answers.size() == 2) both_answered.Notify();
  };
  BarrierRelay relay(&client, "n1");
  BarrierArrival a;
  a.local_world_size = 2;
  a.name = "sync";
  relay.SetAttempt("job-1", 3);
  a.rank = 0;
  relay.OnArrival("job-1", 3, a, reply);
  {
    absl::MutexLock lock(&client.mu_);
    EXPECT_TRUE(client.barriers.empty());  // one local worker is still missing
  }
  a.rank = 1;
  relay.OnArrival("job-1", 3, a, reply);
  ASSERT_TRUE(both_answered.WaitForNotificationWithTimeout(absl::Seconds(60)));
  absl::MutexLock lock(&client.mu_);
  ASSERT_EQ(client.barriers.size(), 1u);
  EXPECT_EQ(client.barriers[0].job_id(), "job-1");
  EXPECT_EQ(client.barriers[0].round(), 3);
  EXPECT_EQ(client.barriers[0].name(), "sync");
  EXPECT_EQ(client.barriers[0].participant(), "n1");
  absl::MutexLock answers_lock(&mu);
  EXPECT_TRUE(answers[0].ok() && answers[1].ok());
}

TEST(BarrierRelayTest, ANewAttemptAbortsWaitingWorkersOfItsJobOnly) {
  FakeClient client;
  // Declared before the relay: its destructor answers what still waits.
  absl::Status answer;
  absl::Status other_job;
  BarrierRelay relay(&client, "n1");
  relay.SetAttempt("job-1", 0);
  BarrierArrival a;
  a.local_world_size = 2;
  a.name = "sync";
  relay.OnArrival("job-1", 0, a, [&](const absl::Status& st) { answer = st; });
  relay.OnArrival("job-2", 4, a, [&](const absl::Status& st) { other_job = st; });
  relay.SetAttempt("job-1", 1);
  EXPECT_TRUE(absl::IsAborted(answer)) << answer;
  EXPECT_TRUE(other_job.ok()) << "another job's waiting worker was answered: " << other_job;
}

TEST(LogForwarderTest, NewestProgressIsRelayedWithItsAttempt) {
  FakeClient client;
  LogForwarderOptions o;
  o.node_id = "n1";
  o.thread = false;
  LogForwarder f(o, &client);
  f.Flush();  // nothing came: nothing sent
  EXPECT_TRUE(client.progress.empty());
  for (int64_t step : {10, 11, 12}) {
    ProgressReport r;
    r.rank = 0;
    r.step = step;
    r.metrics = {{"loss", 0.5}};
    f.OnProgress("job-1", 2, r);
  }
  f.Flush();
  ASSERT_EQ(client.progress.size(), 1u);  // only the newest travels
  const v1::ReportProgressRequest& req = client.progress[0];
  EXPECT_EQ(req.job_id(), "job-1");
  EXPECT_EQ(req.progress().node_id(), "n1");
  EXPECT_EQ(req.progress().round(), 2);
  EXPECT_EQ(req.progress().step(), 12);
  EXPECT_EQ(req.progress().metrics().at("loss"), 0.5);
  f.Flush();  // nothing new: nothing sent
  EXPECT_EQ(client.progress.size(), 1u);
}

TEST(LogForwarderTest, KeptWhileAwayBoundedOldestDropped) {
  FakeClient client;
  LogForwarderOptions o;
  o.node_id = "b";
  o.thread = false;
  o.max_buffered_bytes = 64;
  LogForwarder f(o, &client);
  client.push_status = absl::UnavailableError("away");
  for (int i = 0; i < 20; ++i) {
    f.OnLine("j-1", 0, Line(i % 2, false, absl::StrCat("line ", i)));
    f.Flush();
  }
  EXPECT_TRUE(client.pushes.empty());
  EXPECT_GT(f.dropped_lines(), 0);
  client.push_status = absl::OkStatus();
  f.Flush();
  ASSERT_EQ(client.pushes.size(), 1u);
  std::string all;
  for (const v1::LogChunk& c : client.pushes[0].chunks()) all += c.data();
  EXPECT_THAT(all, ::testing::HasSubstr("line 19\n"));
  EXPECT_THAT(all, ::testing::Not(::testing::HasSubstr("line 0\n")));
  EXPECT_LE(all.size(), 64u + 16u);
}

// The service skips chunks it stored already by their numbers: a resend
// carries the same numbers and the same lines, and lines that come after a
// push was tried go into new chunks with new numbers.
TEST(LogForwarderTest, ChunksAreNumberedAndAResendCarriesTheSameNumbersAndLines) {
  FakeClient client;
  LogForwarderOptions o;
  o.node_id = "b";
  o.incarnation = "inc-1";
  o.thread = false;
  LogForwarder f(o, &client);
  f.OnLine("j-1", 0, Line(0, false, "a"));
  f.OnLine("j-1", 0, Line(1, false, "b"));
  f.Flush();
  ASSERT_EQ(client.pushes.size(), 1u);
  EXPECT_EQ(client.pushes[0].incarnation(), "inc-1");
  EXPECT_EQ(client.pushes[0].first_chunk(), 1);
  EXPECT_EQ(client.pushes[0].chunks_size(), 2);

  // No answer (the service died after storing it, maybe): sent again as it was.
  client.push_status = absl::UnavailableError("away");
  f.OnLine("j-1", 0, Line(1, false, "c"));
  f.Flush();
  f.OnLine("j-1", 0, Line(1, false, "d"));  // same rank and stream as "c"
  client.push_status = absl::OkStatus();
  f.Flush();
  ASSERT_EQ(client.pushes.size(), 2u);
  const v1::PushLogsRequest& r = client.pushes[1];
  EXPECT_EQ(r.first_chunk(), 3);
  ASSERT_EQ(r.chunks_size(), 2);
  EXPECT_EQ(r.chunks(0).data(), "c\n");
  EXPECT_EQ(r.chunks(1).data(), "d\n");

  // Without an incarnation, pushes are not numbered.
  FakeClient old_client;
  o.incarnation.clear();
  LogForwarder unnumbered(o, &old_client);
  unnumbered.OnLine("j-1", 0, Line(0, false, "a"));
  unnumbered.Flush();
  ASSERT_EQ(old_client.pushes.size(), 1u);
  EXPECT_EQ(old_client.pushes[0].first_chunk(), 0);
  EXPECT_TRUE(old_client.pushes[0].incarnation().empty());
}

}  // namespace
}  // namespace elastrun::launcher
