// The agent: runs attempts of a node's worker group on real processes. It is
// the I/O adapter around the Supervisor state machine: one event loop over a
// signalfd (SIGCHLD for exits, so a death is seen at once, and the
// terminating signals the launcher forwards), the workers' output pipes and
// an eventfd for stop requests from other threads.
//
// The launcher becomes a child subreaper, so processes that workers leave
// behind are re-parented to it, reaped, and stopped with their group.
//
// Thread-safety: RunAttempt runs on one thread at a time; RequestStop may be
// called from any thread.
#ifndef ELASTRUN_LAUNCHER_AGENT_AGENT_H_
#define ELASTRUN_LAUNCHER_AGENT_AGENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/progress.h"
#include "launcher/agent/attempt_spec.h"
#include "launcher/agent/process.h"
#include "launcher/agent/supervisor.h"

namespace elastrun::launcher {

struct AgentOptions {
  // Grace between the stop signal and SIGKILL (--shutdown-timeout).
  absl::Duration grace = absl::Seconds(30);
  // Where workers' console lines go (the launcher's stdout and stderr).
  int console_stdout_fd = 1;
  int console_stderr_fd = 2;
  // Start the next attempt's workers ahead of time (common/standby.h), once
  // the current ones have started, so a restart skips process start-up.
  // Only workers built on libelastrun_worker take part; for other programs
  // no standby is ever started.
  bool standby = false;
  // Called on the agent's thread with every complete line a worker writes
  // (e.g. to forward logs to the service); must not block for long.
  std::function<void(const OutputLine&)> on_output_line;
  // A unix datagram socket for the workers' progress reports (exported to
  // them as ELASTRUN_AGENT_SOCKET by the caller; owner-only). Empty: none.
  std::string progress_socket;
  // Called on the agent's thread with every well-formed report received on
  // progress_socket; must not block for long.
  std::function<void(const ProgressReport&)> on_progress;
  // Called on the agent's thread when a worker arrives at a named barrier
  // on progress_socket; `reply` (callable from any thread, once) answers
  // that worker: OK lets it pass, an error fails its barrier. Without this
  // hook every barrier fails at once.
  std::function<void(const BarrierArrival&, std::function<void(const absl::Status&)> reply)>
      on_barrier;
};

class Agent {
 public:
  // Blocks SIGCHLD, SIGINT, SIGTERM, SIGHUP and SIGQUIT in the calling thread
  // (so call it before starting any other thread: they inherit the mask),
  // ignores SIGPIPE, and makes this process a child subreaper.
  static absl::StatusOr<std::unique_ptr<Agent>> Create(AgentOptions options);
  ~Agent();

  // Runs one attempt to its end and returns how it ended. A terminating
  // signal to the launcher is forwarded to the workers (a second one
  // escalates to SIGKILL), and the attempt ends as kStopped. Errors are
  // internal failures of the launcher itself (epoll, signalfd).
  absl::StatusOr<AttemptOutcome> RunAttempt(AttemptSpec spec);

  // Asks the current (or next) attempt to stop with `sig`. Thread-safe.
  void RequestStop(int sig);

  // The first terminating signal the launcher received, or 0.
  int received_signal() const { return received_signal_.load(); }

 private:
  // A started worker of the next attempt, waiting for its activation.
  struct Standby {
    pid_t pid = -1;
    int control = -1;  // our end of its standby socket
    int stdout_fd = -1;
    int stderr_fd = -1;
  };

  Agent(AgentOptions options, std::unique_ptr<ProcessControl> processes, int epoll_fd,
        int signal_fd, int wake_fd, int progress_fd);
  void ReadProgress();
  // Reaps every exited child; workers go to `supervisor` (may be null), and
  // the exit of a standby discards the standby set.
  void ReapChildren(Supervisor* supervisor);
  // Starts `n` standbys running spec's standby_argv/standby_env.
  void SpawnStandbySet(const AttemptSpec& spec, size_t n);
  void DiscardStandbySet();

  const AgentOptions options_;
  std::unique_ptr<ProcessControl> processes_;
  const int epoll_fd_;
  const int signal_fd_;
  const int wake_fd_;
  const int progress_fd_;  // -1 without options_.progress_socket
  std::atomic<int> requested_stop_{0};
  std::atomic<int> received_signal_{0};
  // The next attempt's standby workers (one process group), if started.
  std::vector<Standby> standby_;
  pid_t standby_pgid_ = 0;
  // What the standby set runs: it is only used for an attempt of the same
  // program with the same environment (a node may run another job next).
  std::vector<std::string> standby_argv_;
  std::vector<std::string> standby_env_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_AGENT_H_
