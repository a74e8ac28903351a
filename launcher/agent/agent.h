// The agent: runs attempts of worker groups on real processes, several at
// once. It owns one event loop (a Poller) over everything its attempts
// watch (each worker's pidfd, output pipes, standby sockets), one signalfd
// for SIGCHLD and the terminating signals the launcher forwards (fanned out
// to every running attempt), an eventfd for requests from other threads, and
// the progress socket. Each attempt (AttemptRun) has its own process group,
// log files and Supervisor, and reaps only its own processes.
//
// With AgentOptions::cgroup each attempt also has a cgroup of its own,
// killed as a whole when the attempt ends.
//
// The launcher becomes a child subreaper, so processes that workers leave
// behind are re-parented to it, and reaped and stopped with their group (or,
// when they left it, reaped as orphans that no attempt owns).
//
// Thread-safety: Start, Stop, Quit, received_signal and active may be called
// from any thread. Poll, Run and RunAttempt drive the loop: one thread at a
// time, and `done` callbacks run there.
#ifndef ELASTRUN_LAUNCHER_AGENT_AGENT_H_
#define ELASTRUN_LAUNCHER_AGENT_AGENT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/progress.h"
#include "launcher/agent/attempt_run.h"
#include "launcher/agent/attempt_spec.h"
#include "launcher/agent/poller.h"
#include "launcher/agent/process.h"
#include "launcher/agent/progress_socket.h"
#include "launcher/agent/standby_pool.h"

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
  // Called on the agent's thread with every terminating signal (SIGINT,
  // SIGTERM, SIGHUP, SIGQUIT) the launcher receives, after it was passed to
  // the running attempts; e.g. to shut the daemon down. May be empty.
  std::function<void(int sig)> on_signal;
  // Where time comes from (deadlines: grace, store gate). Null: the real
  // clock. Not owned; tests pass a FakeClock.
  const Clock* clock = nullptr;
  // The program that prints a hung worker's native stacks, looked up on
  // PATH at Create (Debian's elfutils); not found or empty: no native
  // stacks (a worker catching SIGUSR1 still dumps its own).
  std::string stack_tool = "eu-stack";
  // Where hang detection reads /proc; null: RealProcReader(). Not owned.
  ProcReader* proc_reader = nullptr;
  // Whether something listens on a TCP port, for the store gate. Empty:
  // IsListening (launcher/agent/port.h); tests pass a fake.
  std::function<bool(int)> is_listening;
  // The launcher's cgroup v2 folder (LauncherCgroup::dir(), cgroup.h):
  // attempt <id> runs in <cgroup>/attempt-<id>, standbys in
  // <cgroup>/standby-<n>, and an attempt's end kills its cgroup as a whole,
  // so nothing its workers started outlives it. Empty: process groups only.
  std::string cgroup;
};

class Agent {
 public:
  // Identifies a started attempt; ids are never reused.
  using AttemptId = uint64_t;
  // How an attempt ended; an error when it could not begin (a log file that
  // cannot be written; then no worker ran).
  using DoneCallback = std::function<void(absl::StatusOr<AttemptOutcome>)>;

  // Blocks SIGCHLD, SIGINT, SIGTERM, SIGHUP and SIGQUIT in the calling thread
  // (so call it before starting any other thread: they inherit the mask),
  // ignores SIGPIPE, and makes this process a child subreaper. `processes`:
  // null for real processes; tests pass a fake.
  static absl::StatusOr<std::unique_ptr<Agent>> Create(
      AgentOptions options, std::unique_ptr<ProcessControl> processes = nullptr);
  // Attempts still running are abandoned (their workers die with the
  // launcher: PR_SET_PDEATHSIG); stop them and wait for their end first.
  ~Agent();

  // Starts an attempt; it begins on the loop's thread at its next turn.
  // `done` runs exactly once, on the loop's thread, when it has ended.
  AttemptId Start(AttemptSpec spec, DoneCallback done);

  // Stops attempt `id` with `sig` (SIGTERM, the grace, SIGKILL; a second
  // stop with SIGKILL ends the grace). A stop that comes before the
  // attempt's processes started applies to it; a stop for an attempt that
  // has ended (or an unknown id) is a no-op.
  void Stop(AttemptId id, int sig);

  // Serves events for at most `timeout` (less when a deadline comes first):
  // begins started attempts, applies stops, and ends attempts (calling
  // their `done`). Errors are failures of the loop itself (epoll).
  absl::Status Poll(absl::Duration timeout);

  // Polls until Quit() was called and no attempt is active.
  absl::Status Run();
  // Makes Run return once no attempt is active.
  void Quit();

  // Starts `spec` and polls until it ended (for a launcher that runs one
  // attempt at a time on its own thread, like `elastrun run`). A terminating
  // signal to the launcher is forwarded to the workers (a second one
  // escalates to SIGKILL) and the attempt ends as kStopped.
  absl::StatusOr<AttemptOutcome> RunAttempt(AttemptSpec spec);

  // The first terminating signal the launcher received, or 0.
  int received_signal() const { return received_signal_.load(); }
  // Attempts started and not ended.
  size_t active() const;
  // Datagrams dropped on the progress socket because their secret belongs
  // to no live worker (the first is also said on the console's stderr).
  uint64_t dropped_datagrams() const { return dropped_.load(); }

 private:
  struct Request {
    AttemptId id = 0;
    AttemptSpec spec;
    DoneCallback done;
  };
  struct Active {
    std::unique_ptr<AttemptRun> run;
    DoneCallback done;
  };

  Agent(AgentOptions options, std::unique_ptr<ProcessControl> processes,
        std::unique_ptr<Poller> poller, int signal_fd, int wake_fd,
        std::unique_ptr<ProgressSocket> progress);
  // Begins the attempts started and applies the stops asked since the last
  // call (in that order: a stop may name an attempt that begins now).
  void TakeRequests();
  void Begin(Request request);
  void OnSignals();
  // Ends the attempts that are done: their `done` runs last.
  void EndFinished();
  void Ended(AttemptId id);
  void ReadProgress();
  // The attempt and worker whose secret `secret` is; null when none.
  AttemptRun* FindWorker(absl::string_view secret, size_t* worker);
  // Counts a datagram without a live worker's secret; says so the first time.
  void Drop(absl::string_view what);
  // Reaps exited children that no attempt and no standby set owns: a
  // worker's child that left its group (setsid) and was re-parented here
  // when its parent died. Without it a long-lived daemon would keep them as
  // zombies, since nothing waits on "any child".
  void ReapOrphans();

  const AgentOptions options_;
  const Clock* const clock_;
  std::unique_ptr<ProcessControl> processes_;
  std::unique_ptr<Poller> poller_;
  const int signal_fd_;
  const int wake_fd_;
  std::unique_ptr<ProgressSocket> progress_;  // null without progress_socket
  std::atomic<int> received_signal_{0};
  std::atomic<uint64_t> dropped_{0};
  std::string stack_tool_;  // resolved; empty: none
  // A SIGCHLD came and orphans may wait to be reaped (loop thread only).
  bool scan_orphans_ = false;
  // The next attempt's pre-started workers (AgentOptions::standby).
  std::unique_ptr<StandbyPool> standbys_;
  // Loop thread only. Declared last, so destroyed first: attempts use the
  // poller and the pool until their end.
  std::map<AttemptId, Active> runs_;

  mutable absl::Mutex mu_;
  AttemptId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<Request> starts_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<AttemptId, int>> stops_ ABSL_GUARDED_BY(mu_);
  // Started and not ended: what a Stop may reach.
  std::set<AttemptId> live_ ABSL_GUARDED_BY(mu_);
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_AGENT_H_
