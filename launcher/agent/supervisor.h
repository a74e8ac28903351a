// The agent's supervisor: a state machine for one attempt of a node's worker
// group. It starts every worker in one new process group, learns of exits
// from its owner (which reaps children), and on the first failure or on a
// stop request signals the whole group, waits a grace period, then kills it.
// It never reads the clock or blocks: time comes in as arguments and process
// work goes through a ProcessControl, so tests drive it with fakes.
//
// Not thread-safe; one owner (the agent's event loop) feeds it.
#ifndef ELASTRUN_LAUNCHER_AGENT_SUPERVISOR_H_
#define ELASTRUN_LAUNCHER_AGENT_SUPERVISOR_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launcher/agent/process.h"

namespace elastrun::launcher {

// One worker of an attempt.
struct WorkerSpec {
  int local_rank = 0;
  int rank = 0;
  ProcessSpec process;  // its process_group is set by the supervisor
};

// How a worker ended. `signal` != 0 means it was killed by that signal.
struct WorkerExit {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  int exit_code = 0;
  int signal = 0;
  absl::Time time;
  // Declared hung by the agent (liveness.h) rather than failed by itself:
  // `time` is when; exit_code/signal are how it ended once stopped.
  bool hung = false;
  int64_t hung_step = -1;   // its newest reported step; -1: none
  absl::Duration hung_for;  // without progress until declared hung
  // The code a shell would show: exit_code, or 128 + signal.
  int ShellCode() const { return signal != 0 ? 128 + signal : exit_code; }
  bool ok() const { return signal == 0 && exit_code == 0; }
};

// Renders "exit code 3" or "signal 9 (SIGKILL)".
std::string DescribeExit(const WorkerExit& exit);

// Says which workers (Supervisor::unreaped) the attempt ended without, and
// what that means; "" for none.
std::string DescribeUnreaped(const std::vector<WorkerExit>& unreaped);

class Supervisor {
 public:
  struct Options {
    // Time between the polite stop signal and SIGKILL.
    absl::Duration grace = absl::Seconds(30);
  };
  enum class State {
    kIdle,      // nothing started
    kRunning,   // workers running, none failed
    kStopping,  // group signalled; waiting for every process to end
    kDone,      // every worker reaped and the group is empty
  };

  Supervisor(ProcessControl* processes, Options options);

  // Starts every worker, in order, in one new process group. On a spawn
  // failure the workers already started are stopped (as by Stop(SIGKILL))
  // and the error is returned; the caller keeps feeding exits until kDone.
  // Returns the spawned processes in the order of `workers`.
  absl::StatusOr<std::vector<SpawnedProcess>> Start(std::vector<WorkerSpec> workers,
                                                    absl::Time now);

  // As Start, for workers whose processes already run (standby workers that
  // were just activated): `pids` in the order of `workers`, all in `pgid`.
  void Adopt(std::vector<WorkerSpec> workers, const std::vector<pid_t>& pids, pid_t pgid);

  // A child was reaped with `wait_status` (as from waitpid). Pids that are
  // not workers (orphaned grandchildren reaped by a subreaper) only prompt a
  // check of whether the group is empty now.
  void OnExit(pid_t pid, int wait_status, absl::Time now);

  // Worker `index` is hung: it becomes the root cause (first_failure, with
  // the hang's fields; its signal reads SIGTERM until it is reaped with a
  // failure of its own), so the attempt fails however its workers end now;
  // the caller stops the group (Stop) once it has dumped the worker's
  // stacks. No-op unless running or when a failure came first.
  void DeclareHung(size_t index, int64_t step, absl::Duration idle, absl::Time now);

  // Stops the attempt: `sig` to the group now, SIGKILL once the grace period
  // ends. A second call with SIGKILL escalates at once. No-op when done.
  void Stop(int sig, absl::Time now);

  // Fires the SIGKILL deadline when due, and re-checks an emptied group.
  void OnTick(absl::Time now);

  // When OnTick must be called next, if ever.
  std::optional<absl::Time> NextDeadline() const;

  State state() const { return state_; }
  pid_t process_group() const { return pgid_; }
  // Every worker exited 0 and no stop was requested. Meaningful once kDone.
  bool succeeded() const;
  // The earliest failed worker (the root cause), if any.
  const std::optional<WorkerExit>& first_failure() const { return first_failure_; }
  // Exits in the order they were seen.
  const std::vector<WorkerExit>& exits() const { return exits_; }
  // The signal Stop() was called with first, or 0.
  int stop_signal() const { return stop_signal_; }
  int running() const { return running_; }
  // Worker `index`'s pid; -1 once reaped (or out of range).
  pid_t pid(size_t index) const { return index < pids_.size() ? pids_[index] : -1; }
  // The group still had members when the supervisor gave up waiting.
  bool leftovers() const { return leftovers_; }
  // Workers SIGKILL did not end within the reap limit (uninterruptible
  // sleep): given up on, their exit never counted. Their pid and rank.
  const std::vector<WorkerExit>& unreaped() const { return unreaped_; }

 private:
  // `cleanup`: stopping leftovers of a finished group, not the attempt.
  void BeginStop(int sig, absl::Time now, bool cleanup = false);
  void MaybeFinish(absl::Time now);

  ProcessControl* const processes_;
  const Options options_;
  State state_ = State::kIdle;
  pid_t pgid_ = 0;
  std::vector<WorkerSpec> workers_;
  std::vector<pid_t> pids_;  // by index into workers_; -1 once reaped
  int running_ = 0;
  std::vector<WorkerExit> exits_;
  std::optional<WorkerExit> first_failure_;
  int stop_signal_ = 0;
  bool killed_ = false;
  std::optional<absl::Time> kill_at_;
  // After SIGKILL, how long to wait for the group to empty before giving up
  // on processes that cannot be reaped here (for example re-parented away).
  std::optional<absl::Time> give_up_at_;
  bool leftovers_ = false;
  std::vector<WorkerExit> unreaped_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_SUPERVISOR_H_
