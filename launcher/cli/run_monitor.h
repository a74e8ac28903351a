// How each node of `elastrun run`'s multi-node form (run_multinode.h)
// follows its run: the run's job at the rendezvous, and
// the end every node reports the same way.
#ifndef ELASTRUN_LAUNCHER_CLI_RUN_MONITOR_H_
#define ELASTRUN_LAUNCHER_CLI_RUN_MONITOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "elastrun/v1/jobs.pb.h"
#include "launcher/cli/client.h"
#include "launcher/cli/run_options.h"
#include "launcher/daemon/hooks.h"

namespace elastrun::launcher {

// The run's job at the rendezvous (the embedded service holds one job),
// checked against this node's flags: another run on the same endpoint, or
// a node whose --nproc-per-node (`nproc`, resolved) or --nnodes differ from
// the host's, must not join it. Waits for the host's job up to the
// keep-alive time. Unavailable (no job), FailedPrecondition (another run,
// another shape), each with the message to say.
absl::StatusOr<std::string> FindRunJob(const RunOptions& o, int nproc, JobsClient* jobs,
                                       StopRequest* stop);

// FailedPrecondition, saying what differs, unless `job` is the run of
// these flags: its run id, --nnodes and this node's --nproc-per-node
// (`nproc`, resolved).
absl::Status CheckRunJob(const RunOptions& o, int nproc, const v1::JobStatus& job);

// The elastrun backend: every node submits the run (MultinodeJobSpec with
// `argv`) under the request id RunPool(run id), so the service makes one
// job of it, whichever node comes first, and the others get its id.
// Sent again while the service cannot be reached, up to join_timeout.
// FailedPrecondition when that job is another shape (CheckRunJob) or has
// already ended (a run id used before); else the service's refusal.
absl::StatusOr<std::string> SubmitRunJob(const RunOptions& o, int nproc,
                                         const std::vector<std::string>& argv,
                                         JobsClient* jobs, StopRequest* stop);

// Says how the job ended (success; or the state, why, and the root cause
// with its traceback) and returns the exit code: 0, the root cause's exit
// code, 128+signal when it was killed, 127 when it could not start, else 1.
// The root cause is the block every form prints (launcher/protocol/failure.h);
// its logs are under `run_dir` on its node.
int FinishedExitCode(const RunOptions& o, const v1::JobStatus& s, const std::string& run_dir);

// Watches the run's job at the rendezvous until it ends, this node is
// stopped, or the host is lost (no answer for keep_alive_interval x
// keep_alive_max_attempt; a running service of the elastrun backend, for
// join_timeout, saying so once it was silent that long). Polls every
// 200 ms. Not thread-safe: one
// thread calls Run.
class RunMonitor {
 public:
  // Not owned; all must outlive the monitor.
  // `hosting`: this node hosts the rendezvous; then (and on every node with
  // the elastrun backend) it also ends a run that has not got its --nnodes
  // minimum within join_timeout, as torchrun's rendezvous does (the
  // service itself queues such a job for ever).
  // `run_dir`: this run's log folder (the same layout on every node).
  RunMonitor(const RunOptions& o, JobsClient* jobs, StopRequest* stop, std::string job_id,
             std::string run_dir, bool hosting = false)
      : o_(o),
        jobs_(jobs),
        stop_(stop),
        job_id_(std::move(job_id)),
        run_dir_(std::move(run_dir)),
        hosting_(hosting) {}

  // The exit code (-1: a stop of -1 was requested: the session ended,
  // refused); `*finished` tells whether the job ended. Says why.
  int Run(bool* finished);

 private:
  const RunOptions& o_;
  JobsClient* const jobs_;
  StopRequest* const stop_;
  const std::string job_id_;
  const std::string run_dir_;
  const bool hosting_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_RUN_MONITOR_H_
