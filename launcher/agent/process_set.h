// The processes of one attempt, as the event loop sees them: one exit
// descriptor (pidfd) per worker, so a worker's exit is reaped the moment it
// happens and by its pid only, and the reaping of what the workers left in
// their process groups (grandchildren re-parented to the launcher, which is
// a child subreaper). Nothing here waits on "any child": several attempts
// share one launcher and each reaps only its own processes.
//
// Not thread-safe: used on the agent's loop thread.
#ifndef ELASTRUN_LAUNCHER_AGENT_PROCESS_SET_H_
#define ELASTRUN_LAUNCHER_AGENT_PROCESS_SET_H_

#include <sys/types.h>

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "launcher/agent/poller.h"
#include "launcher/agent/process.h"

namespace elastrun::launcher {

class ProcessSet {
 public:
  // Nothing is owned.
  ProcessSet(ProcessControl* processes, Poller* poller);
  // Stops watching; closes the exit descriptors. Reaps nothing.
  ~ProcessSet();
  ProcessSet(const ProcessSet&) = delete;
  ProcessSet& operator=(const ProcessSet&) = delete;

  // Watches worker `pid` (a child of this process) for its exit, and `pgid`
  // as one of the set's groups. When no exit descriptor can be opened the
  // worker is still reaped with its group (on SIGCHLD, ReapGroups).
  absl::Status Add(pid_t pid, pid_t pgid);
  // A group of the set whose members are not known one by one (workers
  // started before a spawn failed): reaped with the group on SIGCHLD.
  void AddGroup(pid_t pgid);

  // Reaps every exited child in the set's groups (call on SIGCHLD):
  // grandchildren left behind, and workers whose exit raced their pidfd.
  void ReapGroups();

  // The children reaped since the last call, as (pid, wait status): workers
  // and strays alike. Exits seen together are ordered by severity (a death
  // by signal, then an exit code, then a clean exit), since the order of
  // their events says nothing about who died first: when one worker dies its
  // peers often fail a moment later on a closed connection.
  std::vector<std::pair<pid_t, int>> TakeExits();

  // Whether `pid` is a worker of the set not reaped yet.
  bool Owns(pid_t pid) const { return exit_fds_.count(pid) > 0; }

  // Workers not reaped yet.
  size_t live() const { return exit_fds_.size(); }

 private:
  void OnExitFd(pid_t pid);
  void Reaped(pid_t pid, int status);

  ProcessControl* const processes_;
  Poller* const poller_;
  std::vector<std::pair<pid_t, int>> reaped_;
  std::map<pid_t, int> exit_fds_;  // live worker -> its pidfd (-1: none)
  std::set<pid_t> groups_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_PROCESS_SET_H_
