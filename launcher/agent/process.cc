#include "launcher/agent/process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
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

absl::StatusOr<SpawnedProcess> PosixProcessControl::Spawn(const ProcessSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("no program to run");
  std::string path_var = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& e : spec.env) {
    if (e.rfind("PATH=", 0) == 0) path_var = e.substr(5);
  }
  std::string program;
  {
    auto resolved = ResolveProgram(spec.argv[0], path_var);
    if (!resolved.ok()) return resolved.status();
    program = *std::move(resolved);
  }

  // Everything the child touches is prepared here: after fork only
  // async-signal-safe calls are allowed (the daemon has other threads).
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const char* cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();

  int out[2] = {-1, -1}, err[2] = {-1, -1}, exec_err[2] = {-1, -1};
  auto close_all = [&] {
    for (int* p : {out, err, exec_err}) {
      CloseFd(p[0]);
      CloseFd(p[1]);
    }
  };
  if (spec.capture_output &&
      (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)) {
    int e = errno;
    close_all();
    return ErrnoError("pipe", e);
  }
  if (pipe2(exec_err, O_CLOEXEC) != 0) {
    int e = errno;
    close_all();
    return ErrnoError("pipe", e);
  }

  const pid_t parent = getpid();
  const pid_t pgid = spec.process_group;
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close_all();
    return ErrnoError("fork", e);
  }
  if (pid == 0) {
    // Child. Async-signal-safe calls only.
    int code = 0;
    if (setpgid(0, pgid) != 0) code = errno;
    if (code == 0 && prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) code = errno;
    // The launcher may have died between fork and prctl.
    if (code == 0 && getppid() != parent) _exit(1);
    if (code == 0 && spec.capture_output) {
      if (dup2(out[1], STDOUT_FILENO) < 0 || dup2(err[1], STDERR_FILENO) < 0) code = errno;
    }
    for (const auto& [from, to] : spec.pass_fds) {
      // dup2 clears close-on-exec on the copy; same-number needs it cleared.
      if (code == 0 && from == to && fcntl(from, F_SETFD, 0) != 0) code = errno;
      if (code == 0 && from != to && dup2(from, to) < 0) code = errno;
    }
    // Undo the launcher's signal set-up: exec keeps ignored dispositions
    // and the blocked mask, and workers must see signals normally.
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s) sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (code == 0 && cwd != nullptr && chdir(cwd) != 0) code = errno;
    if (code == 0 && spec.niceness != 0) {
      (void)setpriority(PRIO_PROCESS, 0, spec.niceness);  // best effort
    }
    if (code == 0) {
      execve(program.c_str(), argv.data(), envp.data());
      code = errno;
    }
    ssize_t ignored = write(exec_err[1], &code, sizeof code);
    (void)ignored;
    _exit(127);
  }

  // Parent. Set the group here too, so it is in place before we return
  // whichever of parent and child runs first (EACCES: child already exec'd).
  if (setpgid(pid, pgid == 0 ? pid : pgid) != 0 && errno != EACCES && errno != ESRCH) {
    // The child reports its own failure through exec_err.
  }
  CloseFd(out[1]);
  CloseFd(err[1]);
  CloseFd(exec_err[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(exec_err[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  CloseFd(exec_err[0]);
  if (n == sizeof child_errno) {
    // Exec failed: reap the child now so no zombie is left for the caller.
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    CloseFd(out[0]);
    CloseFd(err[0]);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot run '", spec.argv[0], "' (", program, "): ", std::strerror(child_errno)));
  }
  SpawnedProcess p;
  p.pid = pid;
  p.stdout_fd = out[0];
  p.stderr_fd = err[0];
  for (int fd : {p.stdout_fd, p.stderr_fd}) {
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return p;
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
