// A fake ProcessControl for the agent's tests: no process is ever started.
// Spawned "processes" get real pipes (the test writes their output) and
// keep copies of the descriptors handed to them (their standby sockets);
// exits happen when the test says so, or when a signal they obey reaches
// their group, and are announced as the kernel would (exit descriptor
// readable, SIGCHLD to this process).
//
// Not thread-safe: used on the test's thread.
#ifndef ELASTRUN_LAUNCHER_AGENT_FAKE_PROCESSES_H_
#define ELASTRUN_LAUNCHER_AGENT_FAKE_PROCESSES_H_

#include <signal.h>
#include <sys/types.h>

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "launcher/agent/process.h"

namespace elastrun::launcher {

class FakeProcesses : public ProcessControl {
 public:
  struct Proc {
    pid_t pid = -1;
    pid_t pgid = -1;
    ProcessSpec spec;
    int stdout_w = -1;  // write ends of its output pipes
    int stderr_w = -1;
    std::vector<int> passed;  // copies of the descriptors handed to it
    std::vector<int> exit_fds;  // our copies of its exit descriptors
    bool exited = false;
    bool reaped = false;
    int status = 0;
  };

  ~FakeProcesses() override;

  absl::StatusOr<SpawnedProcess> Spawn(const ProcessSpec& spec) override;
  // Recorded; members that obey `sig` die of it.
  absl::Status SignalGroup(pid_t pgid, int sig) override;
  // Recorded in process_signals(); nobody dies of it.
  absl::Status SignalProcess(pid_t pid, int sig) override;
  bool GroupExists(pid_t pgid) override;
  absl::StatusOr<int> OpenExitFd(pid_t pid) override;
  std::vector<std::pair<pid_t, int>> ReapExited(pid_t who) override;
  pid_t PeekExited() override;

  // `pid` exits with `wait_status` (as waitpid reports it).
  void Exit(pid_t pid, int wait_status);
  // A process in `pgid` that no one spawned (a worker's child); returns its
  // pid.
  pid_t AddStray(pid_t pgid);

  Proc& proc(pid_t pid) { return procs_.at(pid); }
  // Pids in spawn order.
  const std::vector<pid_t>& spawned() const { return order_; }
  // (pgid, signal) in the order sent.
  const std::vector<std::pair<pid_t, int>>& signals() const { return signals_; }

  // (pid, signal) sent to single processes, in order.
  const std::vector<std::pair<pid_t, int>>& process_signals() const {
    return process_signals_;
  }

  // Signals every process dies of (SIGKILL always does, but for `unkillable`).
  std::set<int> obeyed = {SIGKILL};
  // Processes no signal ends (uninterruptible sleep: D state).
  std::set<pid_t> unkillable;

 private:
  pid_t next_pid_ = 1000;
  std::map<pid_t, Proc> procs_;
  std::vector<pid_t> order_;
  std::vector<std::pair<pid_t, int>> signals_;
  std::vector<std::pair<pid_t, int>> process_signals_;
};

// Wait statuses as waitpid reports them.
inline int ExitedWith(int code) { return code << 8; }
inline int KilledBy(int sig) { return sig; }

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_FAKE_PROCESSES_H_
