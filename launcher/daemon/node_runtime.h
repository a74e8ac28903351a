// The node's runtime, one for both processes that host a Daemon: elastrund
// (launcher/daemon/main.cc) and each node of `elastrun run`'s multi-node
// form (launcher/cli/run_multinode.cc). It owns the Daemon and its session
// on their thread, lets the agent's hooks reach the Daemon while it exists,
// and leaves in one order: stop the workers, close the Watch stream (the
// service re-forms the job without this node at once), wait for the
// workers.
//
// What differs between the two stays with them: elastrund forwards the
// workers' output to the service and serves metrics; `elastrun run` prints
// it and decides when to leave by watching its one job.
#ifndef ELASTRUN_LAUNCHER_DAEMON_NODE_RUNTIME_H_
#define ELASTRUN_LAUNCHER_DAEMON_NODE_RUNTIME_H_

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "launcher/daemon/barrier.h"
#include "launcher/daemon/client.h"
#include "launcher/daemon/daemon.h"
#include "launcher/daemon/hooks.h"
#include "launcher/daemon/session.h"

namespace elastrun::launcher {

// A new incarnation id for a node process (16 hex digits): the service
// tells a restarted daemon from its predecessor by it.
std::string NewIncarnation();

// The environment workers start from: `environ` (NULL-terminated) without
// the launcher's own settings (the service's token, the TLS files).
std::vector<std::string> WorkerEnvironment(char** environ);

// Sends the workers' barrier arrivals to `barriers`, and tells it of each
// attempt that starts (so that barriers of the job's older rounds abort).
// `barriers` must outlive the Daemon made with `options`.
void RelayBarriers(BarrierRelay* barriers, DaemonOptions* options);

class NodeRuntime {
 public:
  // Makes the Daemon (`router` holds it from now until Leave) and runs its
  // session on a thread of its own; a session that ends in error (the
  // service refused the node) requests a stop of -1 on `stop`. `client`,
  // `runner`, `router` and `stop` are not owned and must outlive this.
  NodeRuntime(DaemonOptions daemon_options, SessionOptions session_options,
              RendezvousClient* client, AttemptRunner* runner,
              std::atomic<Daemon*>* router, StopRequest* stop);
  // Leaves (Leave(SIGTERM, 10 s)) unless left already.
  ~NodeRuntime();
  NodeRuntime(const NodeRuntime&) = delete;
  NodeRuntime& operator=(const NodeRuntime&) = delete;

  // Stops every worker with `sig`, closes the session and waits up to
  // `timeout` for the workers to end. Returns whether they did; when not,
  // the caller should exit at once (the runner's thread still holds their
  // attempt, and their parent-death signal ends them with the process).
  // The Daemon is out of `router` afterwards. Once only.
  bool Leave(int sig, absl::Duration timeout);

  // Why the session ended: OK, or the service's refusal (valid after a
  // stop of -1, or after Leave).
  absl::Status session_status() const;

  Daemon& daemon() { return daemon_; }

 private:
  std::atomic<Daemon*>* const router_;
  Daemon daemon_;
  DaemonSession session_;
  mutable absl::Mutex mu_;
  absl::Status session_status_ ABSL_GUARDED_BY(mu_);
  std::thread session_thread_;
  bool left_ = false;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_NODE_RUNTIME_H_
