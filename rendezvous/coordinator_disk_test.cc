// The Coordinator on a real full file system: its state file on a small
// tmpfs in a private mount namespace (a child process, as root or in a user
// namespace), filled up while a job ends. The end is not reported as done
// (ReportExit fails UNAVAILABLE, so the daemon keeps its report), the write
// is retried, and once space is free the job's end is on disk: a service
// restarted on the same file finds the job SUCCEEDED and its node's slot
// free.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_test_util.h"
#include "rendezvous/coordinator.h"
#include "tests/testing/subprocess.h"

namespace elastrun::rendezvous {
namespace {

using coordinator_testing::RegisterRequest;

// Runs `body` in a child; its exit status.
int RunChild(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

#define CHILD_CHECK(cond, code)                                                     \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return code;                                                                  \
    }                                                                               \
  } while (0)

// The child's scenario: a 1x1 job on node n1 runs; the state's file system
// fills; the job's only node reports success. `retry_from_timer` says how
// the disk comes back: freed and retried from the timer while the service
// runs (false: freed just before the service stops, whose shutdown writes
// it).
int JobEndsOnFullDisk(const std::string& dir, bool retry_from_timer) {
  FakeClock clock(absl::FromUnixSeconds(1700000000));
  CoordinatorOptions o;
  o.clock = &clock;
  o.state_path = dir + "/state.db";
  auto c = Coordinator::Create(o);
  CHILD_CHECK(c.ok(), 30);
  CHILD_CHECK((*c)->RegisterNode(RegisterRequest("n1")).ok(), 31);
  CHILD_CHECK(coordinator_testing::Watch(
                  **c, "n1", std::make_shared<coordinator_testing::RecordingStream>())
                  .ok(),
              32);
  auto job = (*c)->Submit(coordinator_testing::TrainJob(1, 1));
  CHILD_CHECK(job.ok(), 33);
  CHILD_CHECK((*c)->JoinRound(coordinator_testing::JoinRequest("n1", job->job_id(), 0)).ok(), 34);

  const std::string filler = dir + "/filler";
  CHILD_CHECK(testing::FillFileSystem(filler), 35);
  const v1::ReportExitRequest done =
      coordinator_testing::ExitRequest("n1", job->job_id(), 0, /*succeeded=*/true);
  absl::Status st = (*c)->ReportExit(done);
  std::fprintf(stderr, "ReportExit on a full disk: %s\n", st.ToString().c_str());
  // Not done: the daemon keeps the report and sends it again.
  CHILD_CHECK(absl::IsUnavailable(st), 36);
  CHILD_CHECK(st.message().find("state.db") != absl::string_view::npos, 37);
  // Still full: the timer's retries fail and back off; a repeat fails too.
  const int64_t before = (*c)->store_writes().jobs;
  clock.Advance(absl::Seconds(1));
  (*c)->Tick();
  CHILD_CHECK((*c)->store_writes().jobs == before + 1, 38);
  CHILD_CHECK(absl::IsUnavailable((*c)->ReportExit(done)), 39);

  CHILD_CHECK(unlink(filler.c_str()) == 0, 40);
  if (retry_from_timer) {
    clock.Advance(absl::Seconds(1));  // past the backoff, within the lease
    std::optional<absl::Time> next = (*c)->Tick();
    // Nothing left to retry: no timer is due before the lease expiry.
    CHILD_CHECK(!next || *next > clock.Now(), 41);
    CHILD_CHECK((*c)->ReportExit(done).ok(), 42);
  }
  c->reset();  // the service stops (its shutdown retries once more)

  auto again = Coordinator::Create(o);
  CHILD_CHECK(again.ok(), 43);
  v1::GetJobRequest get;
  get.set_job_id(job->job_id());
  auto status = (*again)->GetJob(get);
  CHILD_CHECK(status.ok(), 44);
  std::fprintf(stderr, "after the restart: %s\n",
               v1::JobState_Name(status->state()).c_str());
  CHILD_CHECK(status->state() == v1::JOB_STATE_SUCCEEDED, 45);
  const v1::ListNodesResponse nodes = *(*again)->ListNodes();
  CHILD_CHECK(nodes.nodes_size() == 1 && nodes.nodes(0).free_slots() == 1, 46);
  CHILD_CHECK(nodes.nodes(0).jobs_size() == 0, 47);
  return 0;
}

class CoordinatorDiskTest : public ::testing::TestWithParam<bool> {};

TEST_P(CoordinatorDiskTest, JobEndOnAFullDiskIsRetriedAndSurvivesARestart) {
  const std::string dir = testing::MakeTempDir("coordinator_disk");
  const std::string small = dir + "/small";
  ASSERT_EQ(mkdir(small.c_str(), 0700), 0);
  const bool from_timer = GetParam();
  const int status = RunChild([&] {
    const bool mounted =
        testing::EnterPrivateMountNamespace() &&
        mount("none", small.c_str(), "tmpfs", 0, "size=256k,mode=0700") == 0;
    return mounted ? JobEndsOnFullDisk(small, from_timer) : 20;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 20)
    GTEST_SKIP() << "cannot mount a tmpfs here (no root, no userns)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's message above";
}

INSTANTIATE_TEST_SUITE_P(FreedWhileRunningOrAtShutdown, CoordinatorDiskTest,
                         ::testing::Bool());

}  // namespace
}  // namespace elastrun::rendezvous
