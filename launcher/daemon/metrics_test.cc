#include "launcher/daemon/metrics.h"

#include <signal.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::HasSubstr;

WorkerExit Exit(int local_rank, int code, int sig) {
  WorkerExit e;
  e.local_rank = local_rank;
  e.rank = local_rank;
  e.exit_code = code;
  e.signal = sig;
  return e;
}

TEST(DaemonMetricsTest, WorkerExitsAreCountedByCause) {
  metrics::Registry r;
  DaemonMetrics m(r);
  m.AttemptStarted(3);
  EXPECT_THAT(r.Render(), HasSubstr("\nelastrund_running_workers 3\n"));
  // Rank 1 failed first; the group's stop ended rank 0; rank 2 had exited 0.
  AttemptOutcome failed;
  failed.kind = AttemptOutcome::Kind::kFailed;
  failed.first_failure = Exit(1, 3, 0);
  failed.exits = {Exit(2, 0, 0), Exit(1, 3, 0), Exit(0, 0, SIGTERM)};
  m.AttemptEnded(3, failed);
  m.AttemptStarted(1);
  AttemptOutcome killed;
  killed.kind = AttemptOutcome::Kind::kFailed;
  killed.first_failure = Exit(0, 0, SIGKILL);
  killed.exits = {Exit(0, 0, SIGKILL)};
  m.AttemptEnded(1, killed);
  AttemptOutcome not_started;
  not_started.kind = AttemptOutcome::Kind::kFailed;
  not_started.spawn_error = absl::NotFoundError("no such program");
  m.AttemptEnded(0, not_started);
  m.Restarted(absl::Milliseconds(300));

  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("\nelastrund_attempts_started_total 2\n"));
  EXPECT_THAT(text, HasSubstr("\nelastrund_running_workers 0\n"));
  EXPECT_THAT(text, HasSubstr("\nelastrund_worker_exits_total{cause=\"success\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nelastrund_worker_exits_total{cause=\"exit_code\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nelastrund_worker_exits_total{cause=\"signal\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nelastrund_worker_exits_total{cause=\"stopped\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nelastrund_worker_exits_total{cause=\"cannot_start\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nelastrund_restart_seconds_bucket{le=\"0.5\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nelastrund_restart_seconds_bucket{le=\"0.25\"} 0\n"));
}

}  // namespace
}  // namespace elastrun::launcher
