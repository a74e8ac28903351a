// The node daemon's logic (elastrund): turns the rendezvous service's Watch
// commands into attempts of this node's worker group and reports how they
// end. Free of gRPC and of processes: RPCs go through RendezvousClient
// (daemon_client.h) and attempts through AttemptRunner (daemon_runner.h), so
// tests drive it with fakes. The connection (register, heartbeat, Watch,
// reconnect) lives in DaemonSession (daemon_session.h).
//
// One job at a time: the agent reaps with waitpid(-1), so a node runs one
// attempt at a time, and the service's placement never sends a second job to
// a busy node. Commands are idempotent and keyed by (job, round):
//   JoinRound{job, g}   reserve a MASTER_PORT, call JoinRound (stopping an
//                       older attempt of the job still running, if any).
//   StartAttempt{job,a} run attempt (job, a.round) unless it runs or ran
//                       already; if another attempt still runs, it is stopped
//                       and this one starts when it has ended.
//   StopAttempt{job, g} stop attempt (job, g) if it runs: SIGTERM, grace,
//                       SIGKILL (the agent's job); its end is not reported.
//   EndJob{job}         stop anything of the job and drop its unsent
//                       reports (a later JoinRound may bring the node back).
// When an attempt ends on its own it is reported once: the first worker
// failure (exit code or signal, plus the worker's error file), or success
// when every worker exited 0. Reports the service could not take (it is
// away) are kept and re-sent by FlushReports after the next registration.
//
// Thread-safety: every public method is thread-safe. No RPC, runner call or
// callback runs while mu_ is held.
#ifndef ELASTRUN_LAUNCHER_DAEMON_DAEMON_H_
#define ELASTRUN_LAUNCHER_DAEMON_DAEMON_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "elastrun/v1/rendezvous.pb.h"
#include "launcher/agent/agent.h"
#include "launcher/daemon/client.h"

namespace elastrun::launcher {

// Runs one attempt at a time, asynchronously. Implementations are
// thread-safe.
class AttemptRunner {
 public:
  virtual ~AttemptRunner() = default;
  // Starts attempt `id` (> 0) running `spec`. At most one attempt is active:
  // the caller starts the next only after the previous one's `done` ran.
  // `done` runs exactly once, on a runner thread, when the attempt ended.
  virtual void Start(uint64_t id, AttemptSpec spec,
                     std::function<void(const AttemptOutcome&)> done) = 0;
  // Asks attempt `id` to stop with `sig` (the agent then waits its grace
  // and SIGKILLs). No-op unless `id` is the active attempt.
  virtual void Stop(uint64_t id, int sig) = 0;
};

struct DaemonOptions {
  // This node's id, as registered.
  std::string node_id;
  // Logs go to <log_dir>/<job>/attempt_<round>/<local_rank>/.
  std::string log_dir = "/tmp/elastrund";
  // The environment workers start from ("NAME=value"), usually the daemon's.
  std::vector<std::string> base_env;
  // Working directory of workers when the job gives none; empty: the
  // daemon's own.
  std::string working_dir;
  // The agent's progress socket, exported to workers as
  // ELASTRUN_AGENT_SOCKET; empty: none.
  std::string agent_socket;
  // Called (outside any lock) just before an attempt is handed to the
  // runner, e.g. to tag forwarded log lines. May be empty.
  std::function<void(const std::string& job_id, int64_t round)> on_attempt_start;
  // Called (outside any lock) before exit reports are sent, e.g. to flush
  // forwarded worker output first, so that once the service knows a job
  // ended it also holds the job's last lines.
  std::function<void()> before_reports;
};

class Daemon {
 public:
  // `client` and `runner` are not owned and must outlive the Daemon.
  Daemon(DaemonOptions options, RendezvousClient* client, AttemptRunner* runner);

  // Handles one Watch command (see the file comment). May call JoinRound
  // and start or stop an attempt; returns once the command is acted on (an
  // attempt's end is not awaited).
  void OnCommand(const v1::Command& command);

  // Attempts this node runs now, for RegisterNode: the service re-sends what
  // is still wanted and stops what is not.
  std::vector<v1::RunningAttempt> Running() const;

  // Sends the reports kept while the service was away, in order. A report
  // refused for good (stale round, finished job) is dropped; one that fails
  // with UNAVAILABLE or a deadline is kept for the next call.
  void FlushReports();

  // Stops the running attempt, if any, with `sig`, and starts no other one.
  // Its end is not reported: the service learns of the node's loss from its
  // Watch stream. Returns at once; see WaitIdle.
  void Shutdown(int sig);

  // Waits until no attempt runs, at most `timeout`; returns whether idle.
  bool WaitIdle(absl::Duration timeout);

  // How many reports wait to be sent (for tests and logs).
  size_t pending_reports() const;

 private:
  // The attempt the runner runs (or is about to run).
  struct Attempt {
    uint64_t id = 0;
    std::string job_id;
    int64_t round = 0;
    std::string attempt_dir;
    bool stop_requested = false;  // by a command or Shutdown: no report
  };

  void HandleJoin(const v1::JoinRoundCommand& join);
  void HandleStart(const v1::StartAttempt& start);
  void HandleStop(const std::string& job_id, std::optional<int64_t> round);
  // An attempt built and made current, to hand to the runner.
  struct Launched {
    uint64_t id = 0;
    std::string job_id;
    int64_t round = 0;
    AttemptSpec spec;
  };
  // Builds attempt `start` and makes it current; nullopt when its log
  // folders cannot be made (then a failure report is queued instead).
  std::optional<Launched> Launch(const v1::StartAttempt& start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartOnRunner(std::optional<Launched> launch);
  void OnAttemptEnded(uint64_t id, const AttemptOutcome& outcome);

  const DaemonOptions options_;
  RendezvousClient* const client_;
  AttemptRunner* const runner_;

  mutable absl::Mutex mu_;
  std::optional<Attempt> current_ ABSL_GUARDED_BY(mu_);
  // A StartAttempt waiting for the current attempt to end.
  std::optional<v1::StartAttempt> next_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Attempts that ran: a re-sent StartAttempt never runs one twice.
  std::set<std::pair<std::string, int64_t>> ran_ ABSL_GUARDED_BY(mu_);
  // MASTER_PORTs offered lately: their sockets may linger, so skip them.
  std::deque<int> recent_ports_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::ReportExitRequest> reports_ ABSL_GUARDED_BY(mu_);
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_DAEMON_H_
