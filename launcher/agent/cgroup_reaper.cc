#include "launcher/agent/cgroup_reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "launcher/agent/cgroup.h"

namespace elastrun::launcher {
namespace {

// The reaper's life: wait for EOF, kill, exit. `read_fd` is its only
// descriptor besides stderr.
[[noreturn]] void RunReaper(int read_fd, const std::string& dir) {
  setsid();
  // Not one of the run's processes: the environment it inherited (where
  // tools look for a job's variables) is wiped, in place, so that
  // /proc/PID/environ no longer shows it.
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) memset(*e, 0, strlen(*e));
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd >= 0) {
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
  }
  // Everything else the launcher had open (its end of the pipe included)
  // is closed, or the pipe would never close.
  for (int fd = 3; fd < 1024; ++fd) {
    if (fd != read_fd) close(fd);
  }
  for (;;) {
    char c;
    const ssize_t n = read(read_fd, &c, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) break;  // EOF: the launcher is gone
  }
  absl::StatusOr<int> killed = KillCgroup(dir);
  std::string line;
  if (!killed.ok()) {
    line = absl::StrCat("elastrun: warning: ", killed.status().message(), "\n");
  } else if (*killed > 0) {
    line = absl::StrCat("elastrun: the launcher died; killed ", *killed,
                        " process(es) it left in ", dir, "\n");
  }
  if (!line.empty()) (void)!write(STDERR_FILENO, line.data(), line.size());
  _exit(killed.ok() ? 0 : 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CgroupReaper>> CgroupReaper::Start(const std::string& dir) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(err)));
  }
  if (pid == 0) RunReaper(fds[0], dir);
  close(fds[0]);
  return std::unique_ptr<CgroupReaper>(new CgroupReaper(pid, fds[1]));
}

CgroupReaper::~CgroupReaper() {
  close(fd_);
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace elastrun::launcher
