// The process layer of the agent: spawning workers into process groups and
// signalling those groups. Behind an interface so the supervisor's state
// machine is tested with a fake (no real processes) and the real
// implementation is proven by end-to-end tests.
#ifndef ELASTRUN_LAUNCHER_AGENT_PROCESS_H_
#define ELASTRUN_LAUNCHER_AGENT_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace elastrun::launcher {

// The user a process runs as: set in the child before exec by a launcher
// running as root (a root elastrund runs a job's workers as its owner).
struct ProcessCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  // Supplementary groups (the user's, as initgroups would set them).
  std::vector<gid_t> groups;

  bool operator==(const ProcessCredentials& o) const {
    return uid == o.uid && gid == o.gid && groups == o.groups;
  }
  bool operator!=(const ProcessCredentials& o) const { return !(*this == o); }
};

// What to start. The environment is complete (nothing is inherited).
struct ProcessSpec {
  // argv[0] is looked up on the PATH of `env` when it has no slash.
  std::vector<std::string> argv;
  // "NAME=value" entries: the whole environment of the process.
  std::vector<std::string> env;
  // Working directory; empty keeps the launcher's.
  std::string cwd;
  // 0: the process leads a new process group; otherwise it joins this one.
  pid_t process_group = 0;
  // true: stdout and stderr go to pipes read by the launcher; false: inherited.
  bool capture_output = true;
  // Descriptors of the launcher handed to the child: {launcher fd, child fd}
  // (child fd >= 3). Everything else is closed on exec.
  std::vector<std::pair<int, int>> pass_fds;
  // Scheduling niceness of the child (0: the launcher's).
  int niceness = 0;
  // An open cgroup.procs of the cgroup the child enters before anything
  // else (OpenCgroupProcs in cgroup.h; owned by the caller); -1: the
  // launcher's cgroup.
  int cgroup_procs_fd = -1;
  // Run as this user (groups, then gid, then uid are set before exec; a
  // failure is a spawn error); unset: the launcher's own user.
  std::optional<ProcessCredentials> run_as;
};

struct SpawnedProcess {
  pid_t pid = -1;
  // Read ends of the output pipes (non-blocking, close-on-exec), owned by the
  // caller; -1 when output is not captured.
  int stdout_fd = -1;
  int stderr_fd = -1;
};

// Starts and signals processes. Implementations need not be thread-safe.
class ProcessControl {
 public:
  virtual ~ProcessControl() = default;

  // Starts `spec`. The child dies with SIGKILL when the launcher dies. Fails
  // (and leaves no process behind) when the program cannot be executed, with
  // a message naming the program and the reason.
  virtual absl::StatusOr<SpawnedProcess> Spawn(const ProcessSpec& spec) = 0;

  // Sends `sig` to every process of group `pgid`. A group that no longer
  // exists is not an error.
  virtual absl::Status SignalGroup(pid_t pgid, int sig) = 0;

  // Sends `sig` to process `pid` only (to ask a hung worker for its stacks).
  // A process that no longer exists is not an error. The default does
  // nothing (Unimplemented), for fakes that never need it.
  virtual absl::Status SignalProcess(pid_t pid, int sig) {
    (void)pid;
    (void)sig;
    return absl::UnimplementedError("SignalProcess");
  }
  // Whether any process (zombies included) is still in group `pgid`.
  virtual bool GroupExists(pid_t pgid) = 0;

  // A descriptor (owned by the caller, close-on-exec) that becomes readable
  // once child `pid` has exited: a pidfd, so an exit is seen at once without
  // SIGCHLD and without waiting on every child. Fails when `pid` is gone.
  virtual absl::StatusOr<int> OpenExitFd(pid_t pid) = 0;

  // Reaps exited children without blocking: `who` > 0 that child only, `who`
  // < 0 every child in process group -who (never all children: several
  // attempts share one launcher, each reaps its own). Returns (pid, wait
  // status) per child reaped; empty when none has exited (or none is left).
  virtual std::vector<std::pair<pid_t, int>> ReapExited(pid_t who) = 0;

  // The pid of some exited child not reaped yet, left unreaped; 0 if none.
  // Only to find children that no attempt owns (see Agent::ReapOrphans).
  virtual pid_t PeekExited() = 0;
};

// The real implementation: fork + execve, setpgid, PR_SET_PDEATHSIG.
std::unique_ptr<ProcessControl> NewPosixProcessControl();

// Resolves `program` like execvp would, on `path` (a PATH value). Returns the
// program itself when it contains a slash.
absl::StatusOr<std::string> ResolveProgram(const std::string& program,
                                           const std::string& path);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_PROCESS_H_
