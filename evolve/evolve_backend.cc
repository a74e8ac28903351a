#include "evolve/evolve_backend.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace elastrun::evolve {
namespace {

// Starts `cmd` in its own process group with stdout and stderr into `log`;
// the child gets SIGTERM if this process dies.
absl::StatusOr<pid_t> StartChild(const TrialCommand& cmd, const std::string& log) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& add : cmd.env) replaced |= add.substr(0, add.find('=')) == name;
    if (!replaced) env_strings.push_back(entry);
  }
  for (const std::string& add : cmd.env) env_strings.push_back(add);
  std::vector<char*> argv, envp;
  for (const std::string& a : cmd.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat(log, ": ", std::strerror(errno)));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    execve(argv[0], argv.data(), envp.data());
    dprintf(STDERR_FILENO, "elastrun evolve: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // also here: a Stop right after Start finds the group
  close(fd);
  return pid;
}

// "exit code N" / "killed by signal N" for a wait status.
std::string Describe(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

class LocalBackend : public TrialBackend {
 public:
  explicit LocalBackend(TrialLauncher launcher) : launcher_(std::move(launcher)) {}
  ~LocalBackend() override {
    for (const auto& [pid, child] : children_) kill(-pid, SIGTERM);
    for (const auto& [pid, child] : children_) {
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }

  absl::Status Start(const std::string& name, const TrialCommand& cmd,
                     const std::string& log) override {
    absl::StatusOr<pid_t> pid = StartChild(LocalCommand(launcher_, cmd), log);
    if (!pid.ok()) return pid.status();
    children_[*pid] = Child{name, log, ""};
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<TrialEnd>> WaitAny(absl::Duration timeout) override {
    const absl::Time end = absl::Now() + timeout;
    while (true) {
      int status = 0;
      const bool block = timeout == absl::InfiniteDuration();
      const pid_t pid = waitpid(-1, &status, block ? 0 : WNOHANG);
      if (pid < 0) {
        if (errno == EINTR) continue;
        if (errno == ECHILD && children_.empty()) return std::optional<TrialEnd>();
        return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
      }
      if (pid > 0) {
        auto it = children_.find(pid);
        if (it == children_.end()) continue;  // not an individual
        const Child child = std::move(it->second);
        children_.erase(it);
        TrialEnd e{child.name, WIFEXITED(status) && WEXITSTATUS(status) == 0, ""};
        if (!e.succeeded) {
          e.reason = child.stopped.empty()
                         ? absl::StrCat("elastrun run: ", Describe(status), "; log ", child.log)
                         : child.stopped;
        }
        return std::optional<TrialEnd>(std::move(e));
      }
      if (absl::Now() >= end) return std::optional<TrialEnd>();
      absl::SleepFor(std::min(absl::Milliseconds(50), end - absl::Now()));
    }
  }

  absl::Status Stop(const std::string& name, const std::string& why) override {
    for (auto& [pid, child] : children_) {
      if (child.name != name) continue;
      child.stopped = why;
      if (kill(-pid, SIGTERM) != 0 && errno != ESRCH) {
        return absl::InternalError(absl::StrCat("kill ", name, ": ", std::strerror(errno)));
      }
      return absl::OkStatus();
    }
    return absl::NotFoundError(absl::StrCat(name, " is not running"));
  }

  std::string Where(const std::string& name) const override {
    for (const auto& [pid, child] : children_) {
      if (child.name == name) return absl::StrCat("pid ", pid);
    }
    return "";
  }

 private:
  struct Child {
    std::string name, log;
    std::string stopped;  // why Stop stopped it; "" otherwise
  };
  const TrialLauncher launcher_;
  std::map<pid_t, Child> children_;
};

}  // namespace

std::unique_ptr<TrialBackend> NewLocalBackend(const TrialLauncher& launcher) {
  return std::make_unique<LocalBackend>(launcher);
}

absl::StatusOr<std::string> RunToEnd(const TrialCommand& cmd, const std::string& log) {
  absl::StatusOr<pid_t> pid = StartChild(cmd, log);
  if (!pid.ok()) return pid.status();
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return std::string();
  return Describe(status);
}

}  // namespace elastrun::evolve
