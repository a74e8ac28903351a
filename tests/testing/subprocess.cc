#include "tests/testing/subprocess.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace elastrun::testing {
namespace {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

int MillisUntil(absl::Time deadline) {
  int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string s(*e);
    env[s.substr(0, s.find('='))] = s;
  }
  for (const std::string& s : extra_env) env[s.substr(0, s.find('='))] = s;
  std::vector<std::string> env_list;
  for (auto& [k, v] : env) env_list.push_back(v);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env_list) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  std::string out_path = MakeTempDir("out") + "/output";
  int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) return absl::InternalError(absl::StrCat("open ", out_path));
  pid_t pid = fork();
  if (pid < 0) {
    close(out);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    setpgid(0, 0);
    dup2(out, 1);
    dup2(out, 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execvpe(cargv[0], cargv.data(), cenv.data());
    dprintf(2, "exec %s: %s\n", cargv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(out);
  int pidfd = PidfdOpen(pid);
  if (pidfd < 0) return absl::InternalError("pidfd_open failed");
  return std::unique_ptr<Subprocess>(new Subprocess(pid, pidfd, out_path));
}

Subprocess::~Subprocess() {
  if (!exit_code_) {
    killpg(pid_, SIGKILL);
    int status;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  } else {
    killpg(pid_, SIGKILL);  // anything the process left in its group
  }
  close(pidfd_);
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  pollfd p{pidfd_, POLLIN, 0};
  for (;;) {
    int n = poll(&p, 1, MillisUntil(deadline));
    if (n > 0) break;
    if (n < 0 && errno == EINTR) continue;
    return absl::DeadlineExceededError(
        absl::StrCat("pid ", pid_, " still running after ", absl::FormatDuration(timeout),
                     "; output so far:\n", Output()));
  }
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exit_code_ = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  return status;
}

void Subprocess::Signal(int sig) { kill(pid_, sig); }

std::string Subprocess::Output() const { return ReadFile(output_path_); }

absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv,
                              const std::vector<std::string>& extra_env,
                              absl::Duration timeout) {
  auto p = Subprocess::Start(argv, extra_env);
  if (!p.ok()) return p.status();
  auto w = (*p)->Wait(timeout);
  if (!w.ok()) return w.status();
  return RunResult{*(*p)->exit_code(), (*p)->Output()};
}

std::vector<std::string> ListFiles(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      if (absl::StartsWith(n, prefix)) names.push_back(n);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::vector<std::string>> WaitForFiles(const std::string& dir,
                                                      const std::string& prefix,
                                                      size_t count,
                                                      absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) return absl::InternalError("inotify_init1");
  inotify_add_watch(fd, dir.c_str(), IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE);
  for (;;) {
    // Scan after the watch is in place, so no creation is missed.
    auto names = ListFiles(dir, prefix);
    if (names.size() >= count) {
      close(fd);
      return names;
    }
    pollfd p{fd, POLLIN, 0};
    int n = poll(&p, 1, MillisUntil(deadline));
    if (n == 0) {
      close(fd);
      return absl::DeadlineExceededError(absl::StrCat(
          "only ", names.size(), " of ", count, " files '", prefix, "*' in ", dir,
          " after ", absl::FormatDuration(timeout)));
    }
    char buf[4096];
    while (read(fd, buf, sizeof buf) > 0) {
    }
  }
}

std::vector<pid_t> ProcessesWithEnv(const std::string& entry) {
  std::vector<pid_t> pids;
  const pid_t self = getpid();
  for (const std::string& name : ListFiles("/proc")) {
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = std::stoi(name);
    if (pid == self) continue;
    std::string env = ReadFile(absl::StrCat("/proc/", name, "/environ"));
    size_t start = 0;
    while (start < env.size()) {
      size_t end = env.find('\0', start);
      if (end == std::string::npos) end = env.size();
      if (env.compare(start, end - start, entry) == 0) {
        // A zombie has no environment left; a match is a live process.
        pids.push_back(pid);
        break;
      }
      start = end + 1;
    }
  }
  return pids;
}

std::string MakeTempDir(const std::string& tag) {
  const char* tmp = getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/elastrun-test-", tag, "-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) abort();
  return templ;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool WaitProcessExited(pid_t pid, absl::Duration timeout) {
  const int fd = PidfdOpen(pid);
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  const int got = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  close(fd);
  return got == 1;
}

bool KillGroupsAsLost(const std::vector<pid_t>& pids, absl::Duration timeout) {
  std::vector<pid_t> groups;
  for (pid_t pid : pids) {
    const pid_t group = getpgid(pid);
    if (group <= 0 || group == getpgrp()) return false;
    groups.push_back(group);
  }
  for (pid_t group : groups) kill(-group, SIGKILL);
  const absl::Time deadline = absl::Now() + timeout;
  for (pid_t pid : pids) {
    if (!WaitProcessExited(pid, std::max(deadline - absl::Now(), absl::ZeroDuration()))) {
      return false;
    }
  }
  return true;
}

std::string WriteOwnerOnlyFile(const std::string& path, const std::string& contents) {
  return WriteFile(path, contents, 0600);
}

std::string WriteFile(const std::string& path, const std::string& contents, mode_t mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return "";
  // An existing file keeps its mode through O_TRUNC.
  const bool ok = fchmod(fd, mode) == 0 && write(fd, contents.data(), contents.size()) ==
                                               static_cast<ssize_t>(contents.size());
  close(fd);
  return ok ? path : "";
}

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string BinDir() {
  const char* d = getenv("ELASTRUN_BIN_DIR");
  return d && *d ? d : ELASTRUN_BUILD_BIN_DIR;
}

std::string SourceDir() {
  const char* d = getenv("ELASTRUN_SOURCE_DIR");
  return d && *d ? d : ELASTRUN_BUILD_SOURCE_DIR;
}

std::string TorchPython() {
  static const std::string* python = [] {
    auto r = Run({"/usr/bin/python3", "-c", "import torch.distributed"}, {},
                 absl::Seconds(60));
    return new std::string(r.ok() && r->exit_code == 0 ? "/usr/bin/python3" : "");
  }();
  return *python;
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (fd >= 0) close(fd);
  return ok ? ntohs(addr.sin_port) : -1;
}

bool EnterPrivateMountNamespace() {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (unshare(CLONE_NEWNS) != 0) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
    std::ofstream("/proc/self/setgroups") << "deny";
    std::ofstream("/proc/self/uid_map") << uid << " " << uid << " 1";
    std::ofstream("/proc/self/gid_map") << gid << " " << gid << " 1";
  }
  return mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

bool FillFileSystem(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  static const char block[4096] = {};
  for (;;) {
    if (write(fd, block, sizeof block) < 0) {
      const bool full = errno == ENOSPC;
      close(fd);
      return full;
    }
  }
}

}  // namespace elastrun::testing
