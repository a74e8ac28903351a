// End to end: a C++ worker stuck in a real Gloo collective, under the real
// `elastrun run`. Two ranks of elastrun-test-worker (the worker library's
// Gloo group) run steps of allreduce; in the first attempt rank 1 reports
// one more step and then never enters the next allreduce, so rank 0 waits
// inside it. Gloo's own timeout (30 minutes) is far off: the hang detector
// must find rank 0, dump its native stacks and restart the group.
// Skipped when elastrun-test-worker is not built (ELASTRUN_WITH_TORCH=OFF).
#include <stdlib.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadFile;

constexpr absl::Duration kWait = absl::Seconds(180);

bool HaveEuStack() { return system("command -v eu-stack >/dev/null 2>&1") == 0; }

TEST(CollectiveHangE2eTest, RankLeftInsideAGlooAllReduceIsHungWithItsStacksAndRestarts) {
  const std::string worker = testing::BinDir() + "/elastrun-test-worker";
  if (!testing::FileExists(worker)) {
    GTEST_SKIP() << worker << " is not built (configure with ELASTRUN_WITH_TORCH=ON)";
  }
  const std::string dir = testing::MakeTempDir("collective_hang");
  const std::string logs = dir + "/logs";
  const std::string marker = absl::StrCat("ELASTRUN_TEST_MARKER=collective-hang-", dir);
  // Steps of 200 ms: rank 1's extra report comes 400 ms after rank 0's
  // last, so rank 0 (in the allreduce) is the first without progress.
  absl::StatusOr<testing::RunResult> r = testing::Run(
      {testing::BinDir() + "/elastrun", "run", "--nproc-per-node", "2", "--max-restarts", "1",
       "--hang-timeout", "2s", "--log-dir", logs, "--run-id", "c", worker, "--steps", "5",
       "--step-ms", "200", "--fail-rank", "1", "--fail-at-step", "3", "--fail-mode", "stall"},
      {marker, "ELASTRUN_SNAPSHOT_BASE=" + dir}, kWait);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->output;
  EXPECT_THAT(r->output, HasSubstr("elastrun: rank 0 hung at step 3 (no progress for "));
  EXPECT_THAT(r->output, HasSubstr("; restarting (1 of 1)"));
  EXPECT_THAT(r->output, HasSubstr("[rank0]:rank 0/2 ok restart=1"));
  EXPECT_THAT(r->output, HasSubstr("[rank1]:rank 1/2 ok restart=1"));
  EXPECT_THAT(r->output, HasSubstr("succeeded after 1 restart(s)"));

  const std::string log = ReadFile(logs + "/c/attempt_0/0/stderr.log");
  EXPECT_THAT(log, HasSubstr("elastrun: rank 0 hung at step 3"));
  if (HaveEuStack()) {
    // Every thread's native stack; the main thread inside the worker
    // library's allreduce, a Gloo thread waiting for rank 1's data.
    EXPECT_THAT(log, HasSubstr("TID "));
    EXPECT_THAT(log, HasSubstr("elastrun::worker::ProcessGroup::AllReduce("));
    EXPECT_THAT(log, HasSubstr("gloo::"));
  } else {
    std::cerr << "eu-stack is not installed (elfutils): native stacks not checked\n";
  }
  // Rank 1 stalled outside the collective; it was not declared hung.
  const std::string log1 = ReadFile(logs + "/c/attempt_0/1/stderr.log");
  EXPECT_THAT(log1, HasSubstr("rank 1: injected failure at step 3 (restart 0)"));
  EXPECT_THAT(log1, Not(HasSubstr("hung")));
  EXPECT_THAT(testing::ProcessesWithEnv(marker), ::testing::IsEmpty())
      << "processes were left behind";
}

}  // namespace
}  // namespace elastrun
