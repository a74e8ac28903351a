// The job timeline (`elastrun events`) and the service's metrics, driven
// through the Coordinator with fake Watch streams and a FakeClock.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_test_util.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/job_events.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using coordinator_testing::ExitRequest;
using coordinator_testing::JoinRequest;
using coordinator_testing::RegisterRequest;
using coordinator_testing::TrainJob;

// The value of the sample `key` ("name{labels}") in a text exposition, or
// NaN when absent.
double Sample(const std::string& text, const std::string& key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, key + " ")) {
      double v = 0;
      if (absl::SimpleAtod(line, &v)) return v;
    }
  }
  return std::nan("");
}

class ObserveTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(""); }
  void Open(const std::string& state_path) {
    c_.reset();
    CoordinatorOptions o;
    o.clock = &clock_;
    o.state_path = state_path;
    absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
  }
  void AddNode(const std::string& id) {
    streams_[id] = coordinator_testing::Connect(*c_, RegisterRequest(id));
  }
  std::string Submit(int min, int max, int max_restarts) {
    return coordinator_testing::SubmitOk(*c_, TrainJob(min, max, 1, max_restarts));
  }
  void Join(const std::string& id, const std::string& job, int64_t round) {
    absl::StatusOr<v1::JoinRoundResponse> resp = c_->JoinRound(JoinRequest(id, job, round));
    EXPECT_TRUE(resp.ok()) << id << ": " << resp.status();
  }
  void Report(const std::string& id, const std::string& job, int64_t round, bool ok) {
    v1::ReportExitRequest r = ExitRequest(id, job, round, ok);
    if (!ok) {
      r.mutable_failure()->set_rank(1);
      r.mutable_failure()->set_message("CUDA error: boom\nTraceback ...");
    }
    ASSERT_TRUE(c_->ReportExit(r).ok());
  }
  void Progress(const std::string& job, int64_t round, int64_t step) {
    v1::ReportProgressRequest r;
    r.set_job_id(job);
    r.mutable_progress()->set_round(round);
    r.mutable_progress()->set_step(step);
    ASSERT_TRUE(c_->ReportProgress(r).ok());
  }
  std::vector<v1::JobEvent> Events(const std::string& job) {
    v1::EventsRequest r;
    r.set_job_id(job);
    absl::StatusOr<v1::EventsResponse> resp = c_->Events(r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return {};
    return {resp->events().begin(), resp->events().end()};
  }
  static std::vector<std::string> Kinds(const std::vector<v1::JobEvent>& events) {
    std::vector<std::string> kinds;
    for (const v1::JobEvent& e : events) kinds.push_back(absl::StrCat(e.kind(), "@", e.round()));
    return kinds;
  }
  // Failure, restart, node loss, success: the job of the timeline tests.
  std::string RunEventfulJob() {
    for (const char* id : {"a", "b", "c"}) AddNode(id);
    const std::string job = Submit(2, 3, 1);
    for (const char* id : {"a", "b", "c"}) Join(id, job, 0);
    clock_.Advance(absl::Seconds(2));
    Report("b", job, 0, /*ok=*/false);
    for (const char* id : {"a", "b", "c"}) Join(id, job, 1);
    clock_.Advance(absl::Seconds(2));
    c_->DetachWatch("c", streams_.at("c").get());
    Join("a", job, 2);
    Join("b", job, 2);
    Report("a", job, 2, true);
    Report("b", job, 2, true);
    return job;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> c_;
  std::map<std::string, std::shared_ptr<coordinator_testing::RecordingStream>> streams_;
};

TEST_F(ObserveTest, TimelineOfAFailureARestartANodeLossAndTheEnd) {
  const std::string job = RunEventfulJob();
  const std::vector<v1::JobEvent> events = Events(job);
  EXPECT_THAT(Kinds(events),
              ElementsAre("submitted@0", "round_opened@0", "round_closed@0",
                          "worker_failed@0", "restart@0", "round_opened@1",
                          "round_closed@1", "node_lost@1", "restart@1", "round_opened@2",
                          "round_closed@2", "job_finished@2"));
  const v1::JobEvent& failed = events[3];
  EXPECT_EQ(failed.node_id(), "b");
  EXPECT_EQ(failed.rank(), 1);
  EXPECT_EQ(failed.message(), "exit code 3: CUDA error: boom");
  EXPECT_EQ(failed.time().seconds(), absl::ToUnixSeconds(clock_.Now()) - 2);
  EXPECT_EQ(events[4].message(), "failure (restart 1 of 1)");
  EXPECT_EQ(events[6].message(), "3 nodes, world size 3");
  EXPECT_EQ(events[7].node_id(), "c");
  EXPECT_EQ(events[7].message(), "watch stream closed");
  EXPECT_EQ(events[8].message(), "node lost");
  EXPECT_EQ(events[10].message(), "2 nodes, world size 2");
  EXPECT_THAT(events[11].message(), HasSubstr("SUCCEEDED"));
  EXPECT_EQ(events[0].rank(), -1);

  v1::EventsRequest unknown;
  unknown.set_job_id("nope-1");
  EXPECT_TRUE(absl::IsNotFound(c_->Events(unknown).status()));
}

TEST_F(ObserveTest, MetricsCountRoundsRestartsByCauseJobsAndNodes) {
  RunEventfulJob();
  const std::string text = c_->metrics().Render();
  EXPECT_EQ(Sample(text, "elastrun_rounds_total"), 3) << text;
  EXPECT_EQ(Sample(text, "elastrun_restarts_total{cause=\"failure\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "elastrun_restarts_total{cause=\"node_lost\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "elastrun_restarts_total{cause=\"hang\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "elastrun_restarts_total{cause=\"scale\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "elastrun_rendezvous_seconds_count"), 3) << text;
  EXPECT_EQ(Sample(text, "elastrun_jobs{state=\"succeeded\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "elastrun_jobs{state=\"failed\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "elastrun_nodes{state=\"alive\"}"), 2) << text;
  EXPECT_EQ(Sample(text, "elastrun_nodes{state=\"lost\"}"), 1) << text;
  EXPECT_THAT(text, HasSubstr("# TYPE elastrun_rendezvous_seconds histogram\n"));
}

// A failure the daemon reports as a hang (WorkerFailure.hung): a "hang"
// event naming the rank and step, a restart caused by a hang, counted as
// such; a plain failure whose message mentions hanging is not one.
TEST_F(ObserveTest, HungWorkerIsAHangEventAndAHangRestart) {
  for (const char* id : {"a", "b"}) AddNode(id);
  const std::string job = Submit(2, 2, 2);
  for (const char* id : {"a", "b"}) Join(id, job, 0);
  v1::ReportExitRequest hung = ExitRequest("b", job, 0, false);
  v1::WorkerFailure& f = *hung.mutable_failure();
  f.set_rank(1);
  f.set_exit_code(0);
  f.set_signal(15);  // the launcher's own stop, after the stack dump
  f.set_hung(true);
  f.set_hung_step(5);
  f.set_message("rank 1 hung at step 5 (no progress for 2.1s)");
  ASSERT_TRUE(c_->ReportExit(hung).ok());
  for (const char* id : {"a", "b"}) Join(id, job, 1);
  v1::ReportExitRequest plain = ExitRequest("a", job, 1, false);
  plain.mutable_failure()->set_rank(0);
  plain.mutable_failure()->set_message("the data loader hung up");
  ASSERT_TRUE(c_->ReportExit(plain).ok());

  const std::vector<v1::JobEvent> events = Events(job);
  ASSERT_THAT(Kinds(events),
              ElementsAre("submitted@0", "round_opened@0", "round_closed@0", "hang@0",
                          "restart@0", "round_opened@1", "round_closed@1",
                          "worker_failed@1", "restart@1", "round_opened@2"));
  EXPECT_EQ(events[3].node_id(), "b");
  EXPECT_EQ(events[3].rank(), 1);
  // The hang is the cause: not the signal that ended the worker afterwards.
  EXPECT_EQ(events[3].message(), "rank 1 hung at step 5 (no progress for 2.1s)");
  EXPECT_EQ(events[4].message(), "hang (restart 1 of 2)");
  EXPECT_EQ(events[7].message(), "exit code 3: the data loader hung up");
  EXPECT_EQ(events[8].message(), "failure (restart 2 of 2)");
  const std::string text = c_->metrics().Render();
  EXPECT_EQ(Sample(text, "elastrun_restarts_total{cause=\"hang\"}"), 1) << text;
  EXPECT_EQ(Sample(text, "elastrun_restarts_total{cause=\"failure\"}"), 1) << text;
}

TEST_F(ObserveTest, StepsPerSecondAndGoodputOfARunningJob) {
  AddNode("a");
  const std::string job = Submit(1, 1, 0);
  Join("a", job, 0);  // closes at once: max nodes joined
  clock_.Advance(absl::Seconds(2));  // start-up: not good time
  Progress(job, 0, 0);
  for (int i = 1; i <= 10; ++i) {
    clock_.Advance(absl::Seconds(1));
    Progress(job, 0, 10 * i);
  }
  const std::string text = c_->metrics().Render();
  const std::string key = absl::StrCat("{job=\"", job, "\"}");
  EXPECT_DOUBLE_EQ(Sample(text, "elastrun_job_steps_per_second" + key), 10) << text;
  // 10 s of progress out of 12 s since round 0 opened.
  EXPECT_NEAR(Sample(text, "elastrun_job_goodput" + key), 10.0 / 12.0, 1e-9) << text;
  EXPECT_EQ(Sample(text, "elastrun_jobs{state=\"running\"}"), 1) << text;

  Report("a", job, 0, true);  // finished: its per-job series go
  const std::string after = c_->metrics().Render();
  EXPECT_TRUE(std::isnan(Sample(after, "elastrun_job_goodput" + key))) << after;
}

TEST_F(ObserveTest, TimelineIsKeptWithTheStateAcrossARestart) {
  char dir[] = "/tmp/observe_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/state.db";
  Open(path);
  const std::string job = RunEventfulJob();
  const std::vector<v1::JobEvent> before = Events(job);
  Open(path);
  const std::vector<v1::JobEvent> after = Events(job);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].SerializeAsString(), before[i].SerializeAsString()) << i;
  }
  c_.reset();
  std::remove(path.c_str());
  rmdir(dir);
}

TEST(JobEventsTest, OldestEventsAreDroppedBeyondTheBound) {
  JobRecord job;
  for (size_t i = 0; i < kMaxJobEvents + 5; ++i) {
    RecordEvent(job, absl::UnixEpoch(), kEventRestart, static_cast<int64_t>(i), "", -1,
                std::string(5000, 'x'));
  }
  ASSERT_EQ(job.events.size(), kMaxJobEvents);
  EXPECT_EQ(job.events.front().round(), 5);
  EXPECT_EQ(job.events.back().round(), static_cast<int64_t>(kMaxJobEvents + 4));
  EXPECT_EQ(job.events.front().message().size(), 1024u);
}

}  // namespace
}  // namespace elastrun::rendezvous
