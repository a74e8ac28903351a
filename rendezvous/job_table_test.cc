#include "rendezvous/job_table.h"

#include <sqlite3.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "rendezvous/codec.h"

namespace elastrun::rendezvous {
namespace {

absl::Time T0() { return absl::UnixEpoch() + absl::Hours(1); }

std::string TempDir() {
  char tmpl[] = "/tmp/elastrun_job_table_test.XXXXXX";
  return std::string(mkdtemp(tmpl));
}

v1::JobSpec Spec() {
  v1::JobSpec s;
  s.set_name("train");
  s.set_min_nodes(1);
  s.set_max_nodes(1);
  s.set_nproc_per_node(1);
  s.add_argv("prog");
  return s;
}

v1::Progress Step(int64_t step, absl::Time t) {
  v1::Progress p;
  p.set_step(step);
  *p.mutable_time() = ToProto(t);
  return p;
}

TEST(JobTableTest, ProgressNeverRewritesTheJobRecord) {
  std::unique_ptr<Store> store = *Store::Open(":memory:");
  JobTable jobs(store.get(), JobTableOptions{absl::Seconds(2)});
  absl::StatusOr<JobRecord*> job = jobs.Submit(Spec(), T0());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(store->writes().jobs, 1);
  Outbox out;
  absl::Time now = T0();
  for (int step = 1; step <= 100; ++step) {
    now += absl::Milliseconds(100);  // 10 s in all
    ASSERT_TRUE(jobs.ReportProgress(out, **job, Step(step, now), now).ok());
  }
  EXPECT_EQ(store->writes().jobs, 1);  // still only the submission
  // One small row per 2 s interval: the first report, then at 2.1, 4.1, ...
  EXPECT_EQ(store->writes().progress, 5);
  EXPECT_EQ((*job)->last_progress->step(), 100);  // memory has the newest
  ASSERT_TRUE(jobs.NextProgressFlush().has_value());
  EXPECT_EQ(*jobs.NextProgressFlush(),
            T0() + absl::Milliseconds(8100) + absl::Seconds(2));
  jobs.FlushProgress(out, now);  // not due yet
  EXPECT_EQ(store->writes().progress, 5);
  jobs.FlushProgress(out, *jobs.NextProgressFlush());
  EXPECT_EQ(store->writes().progress, 6);
  EXPECT_FALSE(jobs.NextProgressFlush().has_value());
  EXPECT_EQ(store->writes().jobs, 1);
  EXPECT_TRUE(out.store_status.ok());
}

TEST(JobTableTest, TooManyMetricsAreRefusedAndNothingChanges) {
  std::unique_ptr<Store> store = *Store::Open(":memory:");
  JobTable jobs(store.get(), JobTableOptions{});
  JobRecord* job = *jobs.Submit(Spec(), T0());
  v1::Progress p = Step(1, T0());
  for (int i = 0; i < 257; ++i) (*p.mutable_metrics())["m" + std::to_string(i)] = i;
  Outbox out;
  absl::Status st = jobs.ReportProgress(out, *job, p, T0());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(job->last_progress.has_value());
  EXPECT_EQ(store->writes().progress, 0);
}

TEST(JobTableTest, ReloadKeepsTheRecordAndTheNewestProgress) {
  const std::string path = TempDir() + "/state.db";
  {
    std::unique_ptr<Store> store = *Store::Open(path);
    JobTable jobs(store.get(), JobTableOptions{absl::Seconds(2)});
    JobRecord* job = *jobs.Submit(Spec(), T0());
    Outbox out;
    ASSERT_TRUE(jobs.ReportProgress(out, *job, Step(1, T0()), T0()).ok());  // row: 1
    ASSERT_TRUE(jobs.ReportProgress(out, *job, Step(2, T0() + absl::Seconds(1)),
                                    T0() + absl::Seconds(1))
                    .ok());
    jobs.Persist(out, *job);  // the record carries step 2, newer than the row
    ASSERT_TRUE(out.store_status.ok());
    EXPECT_FALSE(jobs.NextProgressFlush().has_value());  // nothing left to write
  }
  std::unique_ptr<Store> store = *Store::Open(path);
  absl::StatusOr<Store::Contents> contents = store->Load();
  ASSERT_TRUE(contents.ok()) << contents.status();
  JobTable jobs(store.get(), JobTableOptions{});
  ASSERT_TRUE(jobs.Restore(*contents).ok());
  absl::StatusOr<JobRecord*> job = jobs.Find("train-1");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ((*job)->spec.argv(0), "prog");
  ASSERT_TRUE((*job)->last_progress.has_value());
  EXPECT_EQ((*job)->last_progress->step(), 2);
  // A newer row wins over the record.
  Outbox out;
  ASSERT_TRUE(jobs.ReportProgress(out, **job, Step(3, T0() + absl::Seconds(5)),
                                  T0() + absl::Seconds(5))
                  .ok());
  contents = store->Load();
  JobTable again(store.get(), JobTableOptions{});
  ASSERT_TRUE(again.Restore(*contents).ok());
  EXPECT_EQ((*again.Find("train-1"))->last_progress->step(), 3);
  // The next submission does not reuse an id.
  EXPECT_EQ((*again.Submit(Spec(), T0()))->id, "train-2");
}

TEST(JobTableTest, ARequestIdFindsItsJobAcrossAReloadAndOnlyForItsOwner) {
  const std::string path = TempDir() + "/state.db";
  v1::JobSpec mine = Spec();
  mine.mutable_owner()->set_uid(1000);
  v1::JobSpec theirs = Spec();
  theirs.mutable_owner()->set_uid(1001);
  {
    std::unique_ptr<Store> store = *Store::Open(path);
    JobTable jobs(store.get(), JobTableOptions{});
    JobRecord* job = *jobs.Submit(mine, T0(), "req-a");
    EXPECT_EQ(jobs.FindRequest(mine, "req-a"), job);
    EXPECT_EQ(jobs.FindRequest(theirs, "req-a"), nullptr);
    EXPECT_EQ(jobs.FindRequest(mine, "req-b"), nullptr);
    EXPECT_EQ(jobs.FindRequest(mine, ""), nullptr);
    ASSERT_TRUE(jobs.Submit(Spec(), T0()).ok());  // none: not findable by ""
    EXPECT_EQ(jobs.FindRequest(Spec(), ""), nullptr);
  }
  std::unique_ptr<Store> store = *Store::Open(path);
  absl::StatusOr<Store::Contents> contents = store->Load();
  ASSERT_TRUE(contents.ok()) << contents.status();
  JobTable jobs(store.get(), JobTableOptions{});
  ASSERT_TRUE(jobs.Restore(*contents).ok());
  JobRecord* again = jobs.FindRequest(mine, "req-a");
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->id, "train-1");
  EXPECT_EQ(again->request_id, "req-a");
}

TEST(JobTableTest, AFailedProgressWriteKeepsTheRecordAndIsRetriedLater) {
  const std::string path = TempDir() + "/state.db";
  { ASSERT_TRUE(Store::Open(path).ok()); }
  // Every progress row write fails from now on (a fault only that table sees).
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TRIGGER no_progress BEFORE INSERT ON progress BEGIN "
                         "SELECT RAISE(ABORT, 'disk says no'); END",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  std::unique_ptr<Store> store = *Store::Open(path);
  JobTable jobs(store.get(), JobTableOptions{absl::Seconds(2)});
  JobRecord* job = *jobs.Submit(Spec(), T0());
  Outbox out;
  EXPECT_TRUE(jobs.ReportProgress(out, *job, Step(1, T0()), T0()).ok());  // taken
  EXPECT_FALSE(out.store_status.ok());
  EXPECT_NE(out.store_status.message().find("disk says no"), std::string::npos);
  EXPECT_EQ(job->last_progress->step(), 1);
  // Retried one interval later, not on every report.
  ASSERT_TRUE(jobs.NextProgressFlush().has_value());
  EXPECT_EQ(*jobs.NextProgressFlush(), T0() + absl::Seconds(2));
  ASSERT_TRUE(jobs.ReportProgress(out, *job, Step(2, T0() + absl::Seconds(1)),
                                  T0() + absl::Seconds(1))
                  .ok());
  EXPECT_EQ(store->writes().progress, 1);
  // The job record is whole: it reloads with its spec.
  absl::StatusOr<Store::Contents> contents = store->Load();
  ASSERT_TRUE(contents.ok()) << contents.status();
  ASSERT_EQ(contents->jobs.size(), 1u);
  EXPECT_EQ(contents->jobs[0].job_id(), job->id);
  EXPECT_EQ(contents->jobs[0].spec().argv(0), "prog");
  // A record write (a round change, the job's end) still saves the progress.
  Outbox later;
  jobs.Persist(later, *job);
  ASSERT_TRUE(later.store_status.ok()) << later.store_status;
  contents = store->Load();
  EXPECT_EQ(contents->jobs[0].last_progress().step(), 2);
  EXPECT_FALSE(jobs.NextProgressFlush().has_value());
}

TEST(JobTableTest, FindNamesAMissingJob) {
  std::unique_ptr<Store> store = *Store::Open(":memory:");
  JobTable jobs(store.get(), JobTableOptions{});
  absl::StatusOr<JobRecord*> job = jobs.Find("nope-1");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(job.status().message().find("nope-1"), std::string::npos);
}

}  // namespace
}  // namespace elastrun::rendezvous
