// One attempt on the agent's event loop: its workers (started, or activated
// from the standby pool), their exits (ProcessSet), output (OutputPump),
// standby sockets, the store gate, and the Supervisor state machine that
// decides when to stop the group. The Agent owns the loop and feeds every
// AttemptRun its events; an AttemptRun never blocks and reads time only from
// its Clock, so tests drive it with fake processes and a fake clock.
//
// Not thread-safe: used on the agent's loop thread.
#ifndef ELASTRUN_LAUNCHER_AGENT_ATTEMPT_RUN_H_
#define ELASTRUN_LAUNCHER_AGENT_ATTEMPT_RUN_H_

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/progress.h"
#include "launcher/agent/attempt_spec.h"
#include "launcher/agent/liveness.h"
#include "launcher/agent/output_pump.h"
#include "launcher/agent/poller.h"
#include "launcher/agent/process.h"
#include "launcher/agent/process_set.h"
#include "launcher/agent/standby_pool.h"
#include "launcher/agent/store_gate.h"
#include "launcher/agent/supervisor.h"

namespace elastrun::launcher {

// What an attempt borrows from its agent; nothing is owned.
struct AttemptEnv {
  ProcessControl* processes = nullptr;
  Poller* poller = nullptr;
  const Clock* clock = nullptr;
  // The next attempt's pre-started workers; null: no standbys at all.
  StandbyPool* standbys = nullptr;
  // Whether something listens on a TCP port (the store gate's look).
  std::function<bool(int)> is_listening;
  // Grace between the stop signal and SIGKILL.
  absl::Duration grace = absl::Seconds(30);
  int console_stdout_fd = 1;
  int console_stderr_fd = 2;
  // Lines of workers whose AttemptSpec has no on_output_line; may be empty.
  std::function<void(const OutputLine&)> on_output_line;
  // A cgroup folder to create for the attempt's workers (cgroup.h), killed
  // and removed when the attempt finishes. Empty: none. Where it cannot be
  // created the attempt runs without it (after a warning).
  std::string cgroup;
  // Where hang detection reads /proc; null: RealProcReader().
  ProcReader* proc_reader = nullptr;
  // The program that prints a hung worker's native stacks ("eu-stack",
  // resolved); empty: none.
  std::string stack_tool;
};

class AttemptRun {
 public:
  AttemptRun(AttemptEnv env, AttemptSpec spec);
  ~AttemptRun();
  AttemptRun(const AttemptRun&) = delete;
  AttemptRun& operator=(const AttemptRun&) = delete;

  // Opens the log files, then starts the workers: activates the standby set
  // when it runs the same program, else spawns new processes. Errors: a
  // malformed spec or a log file that cannot be written; then nothing was
  // started. A worker that cannot be started is not an error here: the
  // attempt ends as kFailed with spawn_error.
  absl::Status Begin();

  // Stops the attempt with `sig` (SIGTERM, grace, SIGKILL); a second call
  // with SIGKILL skips the rest of the grace. No-op once done.
  void Stop(int sig);

  // A child of the launcher changed state (SIGCHLD): reaps what the
  // attempt's groups left behind.
  void OnChildSignal();

  // Handles what the last events brought (exits, store gate, deadlines);
  // call after every wait of the loop.
  void OnTick();

  // When OnTick is due next without any event (SIGKILL deadline, store gate
  // look); nullopt: only events matter.
  std::optional<absl::Time> NextDeadline() const;

  // Every worker reaped and the group empty (or given up on).
  bool done() const { return supervisor_.state() == Supervisor::State::kDone; }

  // Once done: kills what is left in the attempt's cgroup (processes that
  // left the process group), drains the output, closes every descriptor,
  // and says how the attempt ended.
  AttemptOutcome Finish();

  // The worker whose activation carries `secret` (ELASTRUN_AGENT_SECRET),
  // while the attempt runs; nullopt for any other secret, and once done.
  std::optional<size_t> WorkerWithSecret(absl::string_view secret) const;
  // Worker `i` (from WorkerWithSecret) reported `report` (a step, or a
  // beat: liveness.h).
  void OnProgress(size_t i, const ProgressReport& report);
  // The global rank of worker `i`.
  int rank_of(size_t i) const { return ranks_[i].second; }
  // The attempt's job (AttemptSpec::job_id) and how many workers it has.
  const std::string& job_id() const { return spec_.job_id; }
  int local_world_size() const { return static_cast<int>(n_); }

  // Whether `pid` is a worker of this attempt not reaped yet.
  bool Owns(pid_t pid) const { return processes_.Owns(pid); }

  // The attempt's process group (0 before Begin, or when none started).
  pid_t process_group() const { return supervisor_.process_group(); }

 private:
  absl::Status OpenLogs();
  // Creates the attempt's cgroup; a warning and none when it cannot be had.
  void MakeCgroupOrWarn();
  // Fills `procs` with the standby set's processes, activated.
  void AdoptStandbys(StandbySet set, std::vector<SpawnedProcess>& procs);
  absl::StatusOr<std::vector<SpawnedProcess>> SpawnWorkers();
  void PumpOutput(const std::vector<SpawnedProcess>& procs);
  void Activate(size_t i, std::string activation);
  void MarkStarted(size_t i);
  void OnControl(size_t i);
  void CloseControl(size_t i);
  void MaybeFillStandbys();
  // Samples the workers when due and declares a hang (liveness.h).
  void WatchLiveness(absl::Time now);
  // Dumps the stacks of the hung worker into its log, then (DeclareHung)
  // stops the group once the dump is done or its time is up.
  void BeginDump(const Hang& hang, absl::Time now);
  void MaybeEndDump(absl::Time now);
  // A stream into worker `i`'s stderr log (and console, as its own lines).
  std::unique_ptr<OutputStream> StderrStream(size_t i);

  // A hang being dumped.
  struct Dump {
    Hang hang;
    absl::Time declared_at;
    pid_t tool_pid = -1;    // eu-stack, until it exits
    absl::Time wait_until;  // for the worker's own dump (SIGUSR1)
    absl::Time deadline;    // stop then, dump done or not
  };

  const AttemptEnv env_;
  AttemptSpec spec_;  // its workers move to the supervisor at Begin
  const size_t n_;
  std::vector<std::pair<int, int>> ranks_;  // (local rank, rank) per worker
  // Each worker's user (unset: the agent's), for its stack tool.
  std::vector<std::optional<ProcessCredentials>> run_as_;
  size_t rank0_;  // the worker with rank 0, or n_ when it runs elsewhere
  Supervisor supervisor_;
  ProcessSet processes_;
  OutputPump pump_;
  StoreGate gate_;
  std::vector<int> log_fds_;   // 2 per worker until the pump owns them
  std::vector<int> controls_;  // our ends of the workers' standby sockets
  std::vector<bool> started_;  // reported the end of its start-up
  absl::Status spawn_error_;
  bool from_standby_ = false;
  int cgroup_procs_fd_ = -1;  // the attempt's cgroup.procs until spawned
  bool in_cgroup_ = false;    // env_.cgroup was created
  // The cgroup of a standby set whose processes could not move to the
  // attempt's: killed with the attempt. Empty: none.
  std::string adopted_cgroup_;
  std::vector<std::string> secrets_;  // per worker, fresh for this activation
  Liveness liveness_;
  std::vector<ProcSample> samples_;  // the newest per worker
  absl::Time next_sample_;
  std::optional<Dump> dump_;
  std::vector<int> stderr_logs_;  // copies of the stderr log descriptors, for dumps
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_ATTEMPT_RUN_H_
