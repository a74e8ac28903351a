// What a process that hosts a Daemon (elastrund; each node of `elastrun
// run`'s multi-node form) wires around it: the stop signals, and the
// agent's hooks into the Daemon.
#ifndef ELASTRUN_LAUNCHER_DAEMON_HOOKS_H_
#define ELASTRUN_LAUNCHER_DAEMON_HOOKS_H_

#include <atomic>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "launcher/agent/agent.h"
#include "launcher/daemon/daemon.h"

namespace elastrun::launcher {

// Why the process stops: the first stop signal, or -1 when its session
// ended in error. Thread-safe: the signal thread, the agent's signalfd and
// the session's thread report here, and main waits.
class StopRequest {
 public:
  void Request(int sig) {
    absl::MutexLock lock(&mu_);
    if (signal_ == 0) signal_ = sig;
  }

  // Blocks until a stop is requested; returns its signal (or -1).
  int Wait() {
    absl::MutexLock lock(&mu_);
    auto requested = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return signal_ != 0; };
    mu_.Await(absl::Condition(&requested));
    return signal_;
  }

  // Waits `timeout` or until a stop is requested; returns its signal, or 0
  // when none came.
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

// Blocks the stop signals (INT, TERM, HUP, QUIT) and SIGCHLD in the calling
// thread, so in every thread made after it (gRPC's must never take
// SIGTERM's default action; the agent's signalfd reads them), and passes
// the stop signals to `stop` from a detached thread of its own that lives
// until the process exits. Call first in main, before any thread. False
// when the mask could not be set.
bool HandleStopSignals(StopRequest* stop);

// The agent's hooks into the Daemon: workers' progress reports and barrier
// arrivals go to the Daemon once `router` holds it (atomic: the agent's
// thread may run first; a barrier before then is answered Unavailable,
// "`who` is starting"), and a stop signal the agent's signalfd read goes to
// `stop` too (after the agent passed it to the workers).
void RouteAgentHooks(std::atomic<Daemon*>* router, StopRequest* stop, const std::string& who,
                     AgentOptions* options);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_HOOKS_H_
