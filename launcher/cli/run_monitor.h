// How each node of `elastrun run`'s multi-node form (run_multinode.h)
// follows its run: the stop signal, the run's job at the rendezvous, and
// the end every node reports the same way.
#ifndef ELASTRUN_LAUNCHER_CLI_RUN_MONITOR_H_
#define ELASTRUN_LAUNCHER_CLI_RUN_MONITOR_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "elastrun/v1/jobs.pb.h"
#include "launcher/cli/client.h"
#include "launcher/cli/run_options.h"

namespace elastrun::launcher {

// The first stop signal. Thread-safe: the signal thread, the agent's
// signalfd and the main thread meet here.
class StopSignal {
 public:
  void Request(int sig) {
    absl::MutexLock lock(&mu_);
    if (signal_ == 0) signal_ = sig;
  }
  // Waits `timeout` or until a stop is requested; returns its signal, or 0.
  int WaitFor(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto requested = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return signal_ != 0; };
    mu_.AwaitWithTimeout(absl::Condition(&requested), timeout);
    return signal_;
  }

 private:
  absl::Mutex mu_;
  int signal_ ABSL_GUARDED_BY(mu_) = 0;
};

// The run's job at the rendezvous (the embedded service holds one job),
// checked against this node's flags: another run on the same endpoint, or
// a node whose --nproc-per-node (`nproc`, resolved) or --nnodes differ from
// the host's, must not join it. Waits for the host's job up to the
// keep-alive time. Unavailable (no job), FailedPrecondition (another run,
// another shape), each with the message to say.
absl::StatusOr<std::string> FindRunJob(const RunOptions& o, int nproc, JobsClient* jobs,
                                       StopSignal* stop);

// Says how the job ended (success; or the state, why, and the root cause
// with its traceback) and returns the exit code: 0, the root cause's exit
// code, 128+signal when it was killed, 127 when it could not start, else 1.
int FinishedExitCode(const RunOptions& o, const v1::JobStatus& s);

// Watches the run's job at the rendezvous until it ends, this node is
// stopped, or the host is lost (no answer for keep_alive_interval x
// keep_alive_max_attempt). Polls every 200 ms. Not thread-safe: one
// thread calls Run.
class RunMonitor {
 public:
  // Not owned; all must outlive the monitor.
  RunMonitor(const RunOptions& o, JobsClient* jobs, StopSignal* stop, std::string job_id)
      : o_(o), jobs_(jobs), stop_(stop), job_id_(std::move(job_id)) {}

  // The exit code (-1: a stop of -1 was requested: the session ended,
  // refused); `*finished` tells whether the job ended. Says why.
  int Run(bool* finished);

 private:
  const RunOptions& o_;
  JobsClient* const jobs_;
  StopSignal* const stop_;
  const std::string job_id_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_RUN_MONITOR_H_
