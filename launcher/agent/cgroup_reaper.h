// A watchdog for a launcher that nothing restarts (`elastrun run`): when the
// launcher dies, even by SIGKILL, a small process it forked kills the
// launcher's cgroup as a whole (cgroup.h), so no worker's child outlives it.
//
// The reaper waits on a pipe whose write end only the launcher holds (close-
// on-exec: workers never inherit it); the pipe closes when the launcher
// exits, however it exits. The reaper runs in the launcher's own cgroup,
// outside the one it kills, in a session of its own (a terminal's Ctrl-C
// goes to the launcher, which stops its workers itself).
//
// Not thread-safe: one owner.
#ifndef ELASTRUN_LAUNCHER_AGENT_CGROUP_REAPER_H_
#define ELASTRUN_LAUNCHER_AGENT_CGROUP_REAPER_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace elastrun::launcher {

class CgroupReaper {
 public:
  // Forks the reaper for cgroup folder `dir`. Call it before the launcher
  // starts any thread: the child runs on after fork without exec. When it
  // kills processes it says so on stderr. Errors: pipe or fork failed.
  static absl::StatusOr<std::unique_ptr<CgroupReaper>> Start(const std::string& dir);
  // Closes the pipe (the reaper then kills and removes what is left of
  // `dir`) and waits for the reaper to exit.
  ~CgroupReaper();
  CgroupReaper(const CgroupReaper&) = delete;
  CgroupReaper& operator=(const CgroupReaper&) = delete;

  pid_t pid() const { return pid_; }

 private:
  CgroupReaper(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  const pid_t pid_;
  const int fd_;  // the write end, held by the launcher only
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_CGROUP_REAPER_H_
