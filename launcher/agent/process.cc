#include "launcher/agent/process.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace elastrun::launcher {
namespace {

absl::Status ErrnoError(absl::string_view what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(err)));
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

// Closes a descriptor if open and marks it closed.
void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

class PosixProcessControl : public ProcessControl {
 public:
  absl::StatusOr<SpawnedProcess> Spawn(const ProcessSpec& spec) override;
  absl::Status SignalGroup(pid_t pgid, int sig) override {
    if (pgid <= 0) return absl::InvalidArgumentError("process group must be > 0");
    if (killpg(pgid, sig) != 0 && errno != ESRCH) {
      return ErrnoError(absl::StrCat("killpg(", pgid, ", ", sig, ")"), errno);
    }
    return absl::OkStatus();
  }
  absl::Status SignalProcess(pid_t pid, int sig) override {
    if (pid <= 0) return absl::InvalidArgumentError("pid must be > 0");
    if (kill(pid, sig) != 0 && errno != ESRCH) {
      return ErrnoError(absl::StrCat("kill(", pid, ", ", sig, ")"), errno);
    }
    return absl::OkStatus();
  }
  bool GroupExists(pid_t pgid) override {
    return pgid > 0 && (killpg(pgid, 0) == 0 || errno == EPERM);
  }
  absl::StatusOr<int> OpenExitFd(pid_t pid) override {
    // Through syscall(): glibc 2.36's <sys/pidfd.h> lacks extern "C", so
    // its pidfd_open cannot be linked from C++. The fd is close-on-exec.
    int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) return ErrnoError(absl::StrCat("pidfd_open(", pid, ")"), errno);
    return fd;
  }
  std::vector<std::pair<pid_t, int>> ReapExited(pid_t who) override {
    std::vector<std::pair<pid_t, int>> reaped;
    if (who == 0 || who == -1) return reaped;  // never "any child"
    for (;;) {
      int status = 0;
      pid_t pid = waitpid(who, &status, WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid <= 0) break;  // 0: none exited yet; -1 (ECHILD): none left
      reaped.emplace_back(pid, status);
      if (who > 0) break;
    }
    return reaped;
  }
  pid_t PeekExited() override {
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return 0;
    return info.si_pid;  // 0: children, none exited
  }
};

// The pipes of one spawn: the worker's stdout and stderr (when captured)
// and the one through which a child whose exec failed reports its errno.
// All are close-on-exec, so a successful exec closes the child's ends.
struct SpawnPipes {
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  int exec_err[2] = {-1, -1};

  absl::Status Open(bool capture_output) {
    if (capture_output && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)) {
      int e = errno;
      CloseAll();
      return ErrnoError("pipe", e);
    }
    if (pipe2(exec_err, O_CLOEXEC) != 0) {
      int e = errno;
      CloseAll();
      return ErrnoError("pipe", e);
    }
    return absl::OkStatus();
  }
  void CloseAll() {
    for (int* p : {out, err, exec_err}) {
      CloseFd(p[0]);
      CloseFd(p[1]);
    }
  }
};

// What the child needs after fork, all prepared by the parent beforehand:
// the child may not allocate (the daemon has other threads, whose locks
// fork copies in whatever state they were).
struct ChildPlan {
  const ProcessSpec* spec = nullptr;
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = nullptr;      // null: stay in the launcher's
  const gid_t* groups = nullptr;  // with spec->run_as: its groups
  pid_t parent = 0;               // to detect a launcher that died before prctl
  const SpawnPipes* pipes = nullptr;
};

// Which step of the child failed, reported with its errno.
enum class ChildStage : int { kSetup = 0, kCredentials = 1, kCwd = 2, kExec = 3 };

// Restores default dispositions and an empty mask: exec keeps ignored
// dispositions and the blocked mask, and workers must see signals normally.
// Async-signal-safe.
void ResetSignalsForExec() {
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) sigaction(s, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

// The child's side of fork: its group, parent-death signal, fds, signals,
// cwd and niceness, then execve. Never returns; on failure writes errno to
// the exec_err pipe and exits 127. Async-signal-safe calls only.
[[noreturn]] void RunChild(const ChildPlan& plan) {
  const ProcessSpec& spec = *plan.spec;
  const SpawnPipes& pipes = *plan.pipes;
  int code = 0;
  ChildStage stage = ChildStage::kSetup;
  // First, while the child may still write there (before any change of
  // user), and before it can start anything that must be in it too.
  if (spec.cgroup_procs_fd >= 0 && write(spec.cgroup_procs_fd, "0", 1) != 1) code = errno;
  if (code == 0 && setpgid(0, spec.process_group) != 0) code = errno;
  // Groups, then gid (while still root), then uid: no way back. Before the
  // parent-death signal, which a change of credentials clears.
  if (code == 0 && spec.run_as) {
    const ProcessCredentials& c = *spec.run_as;
    if (setgroups(c.groups.size(), plan.groups) != 0 || setgid(c.gid) != 0 ||
        setuid(c.uid) != 0) {
      code = errno;
      stage = ChildStage::kCredentials;
    }
  }
  if (code == 0 && prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) code = errno;
  // The launcher may have died between fork and prctl.
  if (code == 0 && getppid() != plan.parent) _exit(1);
  if (code == 0 && spec.capture_output) {
    if (dup2(pipes.out[1], STDOUT_FILENO) < 0 || dup2(pipes.err[1], STDERR_FILENO) < 0) {
      code = errno;
    }
  }
  for (const auto& [from, to] : spec.pass_fds) {
    // dup2 clears close-on-exec on the copy; same-number needs it cleared.
    if (code == 0 && from == to && fcntl(from, F_SETFD, 0) != 0) code = errno;
    if (code == 0 && from != to && dup2(from, to) < 0) code = errno;
  }
  ResetSignalsForExec();
  if (code == 0 && plan.cwd != nullptr && chdir(plan.cwd) != 0) {
    code = errno;
    stage = ChildStage::kCwd;
  }
  if (code == 0 && spec.niceness != 0) {
    (void)setpriority(PRIO_PROCESS, 0, spec.niceness);  // best effort
  }
  if (code == 0) {
    execve(plan.program, plan.argv, plan.envp);
    code = errno;
    stage = ChildStage::kExec;
  }
  const int report[2] = {code, static_cast<int>(stage)};
  ssize_t ignored = write(pipes.exec_err[1], report, sizeof report);
  (void)ignored;
  _exit(127);
}

// The parent's side once `pid` is forked: waits for the child's exec (the
// exec_err pipe closes on success, or carries the child's errno). Takes
// the pipes' ownership: on success the read ends of the output pipes go,
// non-blocking, to the result; on failure the child is reaped, every pipe
// closed, and the error names `spec`'s program as given and `program` as
// resolved, and the user or folder when switching to them failed.
absl::StatusOr<SpawnedProcess> AwaitExec(pid_t pid, SpawnPipes& pipes,
                                         const ProcessSpec& spec,
                                         const std::string& program) {
  const std::string& name = spec.argv[0];
  CloseFd(pipes.out[1]);
  CloseFd(pipes.err[1]);
  CloseFd(pipes.exec_err[1]);
  int report[2] = {0, 0};
  ssize_t n;
  do {
    n = read(pipes.exec_err[0], report, sizeof report);
  } while (n < 0 && errno == EINTR);
  CloseFd(pipes.exec_err[0]);
  const int child_errno = report[0];
  if (n == sizeof report) {
    // Exec failed: reap the child now so no zombie is left for the caller.
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    CloseFd(pipes.out[0]);
    CloseFd(pipes.err[0]);
    std::string step;
    if (report[1] == static_cast<int>(ChildStage::kCredentials) && spec.run_as) {
      step = absl::StrCat(" as uid ", spec.run_as->uid, " gid ", spec.run_as->gid);
    } else if (report[1] == static_cast<int>(ChildStage::kCwd)) {
      step = absl::StrCat(" in working folder '", spec.cwd, "'");
    }
    return absl::FailedPreconditionError(absl::StrCat("cannot run '", name, "' (",
                                                      program, ")", step, ": ",
                                                      std::strerror(child_errno)));
  }
  SpawnedProcess p;
  p.pid = pid;
  p.stdout_fd = pipes.out[0];
  p.stderr_fd = pipes.err[0];
  for (int fd : {p.stdout_fd, p.stderr_fd}) {
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return p;
}

absl::StatusOr<SpawnedProcess> PosixProcessControl::Spawn(const ProcessSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("no program to run");
  std::string path_var = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& e : spec.env) {
    if (e.rfind("PATH=", 0) == 0) path_var = e.substr(5);
  }
  absl::StatusOr<std::string> program = ResolveProgram(spec.argv[0], path_var);
  if (!program.ok()) return program.status();

  // Everything the child touches is prepared here: after fork only
  // async-signal-safe calls are allowed (the daemon has other threads).
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  SpawnPipes pipes;
  if (absl::Status st = pipes.Open(spec.capture_output); !st.ok()) return st;
  ChildPlan plan;
  plan.spec = &spec;
  plan.program = program->c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
  if (spec.run_as) plan.groups = spec.run_as->groups.data();
  plan.parent = getpid();
  plan.pipes = &pipes;

  const pid_t pgid = spec.process_group;
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    pipes.CloseAll();
    return ErrnoError("fork", e);
  }
  if (pid == 0) RunChild(plan);

  // Parent. Set the group here too, so it is in place before we return
  // whichever of parent and child runs first. Errors are ignored: EACCES
  // means the child already exec'd (having set it), and any real failure
  // the child reports itself through exec_err.
  (void)setpgid(pid, pgid == 0 ? pid : pgid);
  return AwaitExec(pid, pipes, spec, *program);
}

}  // namespace

absl::StatusOr<std::string> ResolveProgram(const std::string& program,
                                           const std::string& path) {
  if (program.empty()) return absl::InvalidArgumentError("empty program name");
  if (program.find('/') != std::string::npos) {
    if (!IsExecutableFile(program)) {
      return absl::NotFoundError(
          absl::StrCat("cannot run '", program, "': not an executable file"));
    }
    return program;
  }
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", program);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat("cannot run '", program, "': not found on PATH (", path, ")"));
}

std::unique_ptr<ProcessControl> NewPosixProcessControl() {
  return std::make_unique<PosixProcessControl>();
}

}  // namespace elastrun::launcher
