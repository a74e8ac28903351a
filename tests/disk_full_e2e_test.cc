// The service on a full disk: its state dir is a small tmpfs in this test's
// own mount namespace (as root, or in a user namespace; skipped where
// neither is allowed), with a real elastrun-rendezvous, a real elastrund
// and the CLI.
//
// A job whose output is larger than the disk must leave room for the jobs'
// state (the next submit is taken); a service restarted on a disk that is
// full must start and serve what it has, and a job that ended while the
// disk was full must not come back FAILED; a submit on a full disk must say
// "disk full", not "cannot reach"; and once the disk has room again every
// line of the job reaches `elastrun logs`, once and in order (the daemon
// kept what the service could not take).
#include <errno.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using daemon_testing::Cluster;
using daemon_testing::kDeadline;
using daemon_testing::PollUntil;

// Lines the job prints: about 4.4 MB, more than the 3 MiB disk.
constexpr int kLines = 40000;

v1::JobSpec ShellJob(const std::string& name, const std::string& script) {
  v1::JobSpec s = daemon_testing::Spec(name, 1, 1, 1, 0);
  s.add_argv("/bin/sh");
  s.add_argv("-c");
  s.add_argv(script);
  s.set_working_dir("/");
  return s;
}

TEST(DiskFullE2eTest, JobStateBeforeLogsReadOnlyStartAndEveryLineOnceAfter) {
  if (!testing::EnterPrivateMountNamespace()) {
    GTEST_SKIP() << "needs a private mount namespace (root, or user namespaces allowed)";
  }
  const std::string dir = testing::MakeTempDir("disk_full_e2e");
  const std::string state = dir + "/state";
  ASSERT_EQ(mkdir(state.c_str(), 0700), 0);
  ASSERT_EQ(mount("tmpfs", state.c_str(), "tmpfs", 0, "size=3m,mode=0700"), 0)
      << strerror(errno);
  const std::string marker = "ELASTRUN_TEST_DISK_FULL=" + std::to_string(getpid());
  Cluster cluster(dir, marker);
  absl::Cleanup stop = [&] { cluster.StopAll(); };
  ASSERT_NO_FATAL_FAILURE(cluster.StartService("127.0.0.1:0"));
  ASSERT_NO_FATAL_FAILURE(cluster.StartDaemon());
  ASSERT_TRUE(PollUntil([&] { return cluster.WatchingNodes() == 1; }))
      << cluster.DaemonOutput();

  // Numbered lines, 110 bytes each.
  const std::string big = cluster.SubmitSpec(ShellJob(
      "big", absl::StrCat("i=0; while [ $i -lt ", kLines,
                          " ]; do printf '%08d %0100d\\n' $i 0; i=$((i+1)); done")));
  ASSERT_FALSE(big.empty());
  EXPECT_EQ(cluster.WaitFinished(big).state(), v1::JOB_STATE_SUCCEEDED)
      << cluster.service().Output();
  // The logs left room for the next job's state (they took the whole disk,
  // and this submit failed, before).
  const std::string small = cluster.SubmitSpec(ShellJob("small", "exit 0"));
  ASSERT_FALSE(small.empty()) << cluster.service().Output();
  EXPECT_EQ(cluster.WaitFinished(small).state(), v1::JOB_STATE_SUCCEEDED);

  // A job that runs until told to end.
  const std::string go = dir + "/go";
  const std::string ending = cluster.SubmitSpec(
      ShellJob("ending", absl::StrCat("while [ ! -e ", go, " ]; do sleep 0.05; done")));
  ASSERT_FALSE(ending.empty());
  ASSERT_TRUE(
      PollUntil([&] { return cluster.Get(ending).state() == v1::JOB_STATE_RUNNING; }));

  // Something else fills the disk, and the job ends: its end cannot be
  // stored yet.
  ASSERT_TRUE(testing::FillFileSystem(state + "/filler"));
  ASSERT_FALSE(testing::WriteFile(go, "").empty());
  EXPECT_EQ(cluster.WaitFinished(ending).state(), v1::JOB_STATE_SUCCEEDED);

  // The service restarts on the full disk (it did not start at all before)
  // and serves what it has; the node still holds the job's end it was not
  // sure the service kept, so the job is not taken as lost (it came back
  // FAILED, "no daemon runs job", before).
  cluster.service().Signal(SIGTERM);
  ASSERT_TRUE(cluster.service().Wait(kDeadline).ok());
  ASSERT_NO_FATAL_FAILURE(cluster.StartService(cluster.address()));
  EXPECT_EQ(cluster.Get(big).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(cluster.Get(small).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(cluster.WaitFinished(ending).state(), v1::JOB_STATE_SUCCEEDED)
      << cluster.service().Output() << cluster.DaemonOutput();

  // A submit says why it cannot be taken.
  absl::StatusOr<testing::RunResult> refused =
      testing::Run({testing::BinDir() + "/elastrun", "submit", "--rendezvous",
                    cluster.address(), "--retry-for", "0", "--", "/bin/true"},
                   {"ELASTRUN_TOKEN_FILE=" + cluster.token_file(), marker});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->exit_code, 3)
      << refused->output;  // as for a service away: retry later
  EXPECT_TRUE(absl::StrContains(refused->output, "disk full")) << refused->output;
  EXPECT_FALSE(absl::StrContains(refused->output, "cannot reach")) << refused->output;

  // The disk grows: every line of the big job arrives, once, in order.
  ASSERT_EQ(mount("tmpfs", state.c_str(), "tmpfs", MS_REMOUNT, "size=32m,mode=0700"), 0)
      << strerror(errno);
  std::vector<int> numbers;
  const bool all = PollUntil([&] {
    numbers.clear();
    // As a user reads them (one read of the service returns up to 4 MiB).
    absl::StatusOr<testing::RunResult> logs = testing::Run(
        {testing::BinDir() + "/elastrun", "logs", "--rendezvous", cluster.address(), big},
        {"ELASTRUN_TOKEN_FILE=" + cluster.token_file(), marker});
    if (!logs.ok() || logs->exit_code != 0) return false;
    for (absl::string_view line : absl::StrSplit(logs->output, '\n', absl::SkipEmpty())) {
      absl::ConsumePrefix(&line, "[rank0]:");
      int n = -1;
      if (!absl::SimpleAtoi(line.substr(0, 8), &n)) n = -1;
      numbers.push_back(n);
    }
    return numbers.size() >= static_cast<size_t>(kLines);
  });
  std::string gaps;  // where lines are missing or out of place
  for (size_t i = 0, expected = 0; i < numbers.size() && gaps.size() < 200; ++i) {
    if (numbers[i] != static_cast<int>(expected)) {
      absl::StrAppend(&gaps, " at ", i, ": ", numbers[i], " for ", expected, ";");
    }
    expected = numbers[i] + 1;
  }
  EXPECT_TRUE(all) << numbers.size() << " lines of " << kLines << ";" << gaps
                   << cluster.service().Output() << cluster.DaemonOutput();
  ASSERT_EQ(numbers.size(), static_cast<size_t>(kLines));
  for (int i = 0; i < kLines; ++i) ASSERT_EQ(numbers[i], i) << "line " << i;

  // And jobs are taken again.
  const std::string after = cluster.SubmitSpec(ShellJob("after", "exit 0"));
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(cluster.WaitFinished(after).state(), v1::JOB_STATE_SUCCEEDED);

  // The job's end is stored now: a service started again has it.
  cluster.service().Signal(SIGTERM);
  ASSERT_TRUE(cluster.service().Wait(kDeadline).ok());
  ASSERT_NO_FATAL_FAILURE(cluster.StartService(cluster.address()));
  EXPECT_EQ(cluster.Get(ending).state(), v1::JOB_STATE_SUCCEEDED);
}

}  // namespace
}  // namespace elastrun
