#include "launcher/agent/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace elastrun::launcher {
namespace {

absl::Status ErrnoError(absl::string_view what, int err) {
  return absl::FailedPreconditionError(absl::StrCat(what, ": ", std::strerror(err)));
}

// Mount points in mountinfo escape space, tab, newline and backslash as
// octal (\040).
std::string UnescapeMountPath(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 +
                                      (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The first cgroup2 mount: {mount root, mount point}.
absl::StatusOr<std::pair<std::string, std::string>> FindCgroup2Mount(
    const std::string& mountinfo) {
  std::ifstream in(mountinfo);
  if (!in) return absl::FailedPreconditionError(absl::StrCat("cannot read ", mountinfo));
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mount-point options [optional...] - fstype ...
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || dash + 1 == f.end()) continue;
    if (*(dash + 1) != "cgroup2") continue;
    return std::make_pair(UnescapeMountPath(f[3]), UnescapeMountPath(f[4]));
  }
  return absl::FailedPreconditionError("no cgroup2 file system is mounted");
}

absl::Status WriteFile(const std::string& path, absl::string_view text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(absl::StrCat("cannot open ", path), errno);
  ssize_t n = write(fd, text.data(), text.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return ErrnoError(absl::StrCat("cannot write '", text, "' to ", path), err);
  }
  return absl::OkStatus();
}

std::vector<std::string> SubFolders(const std::string& dir) {
  std::vector<std::string> subs;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return subs;
  while (dirent* e = readdir(d)) {
    if (e->d_type != DT_DIR || strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
      continue;
    }
    subs.push_back(absl::StrCat(dir, "/", e->d_name));
  }
  closedir(d);
  return subs;
}

// Whether cgroup.events (open as `fd`) says "populated 1": some process in
// the cgroup or below.
bool Populated(int fd) {
  char buf[256];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return false;  // the folder went away
  buf[n] = '\0';
  return strstr(buf, "populated 1") != nullptr;
}

// The fallback where cgroup.kill is missing: frozen, the processes cannot
// fork while their pids are read and killed.
void KillEach(const std::string& dir) {
  const std::string freeze = dir + "/cgroup.freeze";
  const bool can_freeze = access(freeze.c_str(), W_OK) == 0;
  if (can_freeze) (void)WriteFile(freeze, "1");
  for (pid_t pid : CgroupProcesses(dir)) kill(pid, SIGKILL);
  if (can_freeze) (void)WriteFile(freeze, "0");
}

// rmdir of `dir` and every folder below, deepest first.
absl::Status RemoveTree(const std::string& dir) {
  for (const std::string& sub : SubFolders(dir)) {
    if (absl::Status s = RemoveTree(sub); !s.ok()) return s;
  }
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError(absl::StrCat("cannot remove cgroup ", dir), errno);
  }
  return absl::OkStatus();
}

// Forks a child that enters `dir` and exits: the one sure test that this
// process may move processes there (permissions and delegation rules are
// checked by the kernel at the write). Async-signal-safe in the child.
absl::Status ProbeMove(const std::string& dir) {
  auto fd = OpenCgroupProcs(dir);
  if (!fd.ok()) return fd.status();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(*fd);
    return ErrnoError("fork", e);
  }
  if (pid == 0) _exit(write(*fd, "0", 1) == 1 ? 0 : (errno & 0x7f));
  close(*fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return ErrnoError(absl::StrCat("cannot move a process into ", dir),
                      WIFEXITED(status) ? WEXITSTATUS(status) : EIO);
  }
  return absl::OkStatus();
}

std::string Comm(const std::string& pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/comm"));
  std::string comm;
  std::getline(in, comm);
  return comm;
}

// Whether `pid` has exited (gone, or a zombie nobody reaped yet).
bool Exited(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return true;
  const size_t paren = stat.rfind(')');  // the name may hold anything
  const char state = paren + 2 < stat.size() ? stat[paren + 2] : 'X';
  return state == 'Z' || state == 'X';
}

// Whether `pid` is a live launcher like this one: running the same program
// (a pid reused by another program is not it). This process itself is not:
// a folder of its pid was left by an earlier process.
bool IsLauncherAlive(int pid) {
  if (pid <= 0 || pid == getpid() || Exited(pid)) return false;
  const std::string comm = Comm(absl::StrCat(pid));
  return !comm.empty() && comm == Comm("self");
}

}  // namespace

absl::StatusOr<std::string> FindOwnCgroup(const CgroupSources& sources) {
  auto mount = FindCgroup2Mount(sources.mountinfo);
  if (!mount.ok()) return mount.status();
  std::ifstream in(sources.self_cgroup);
  std::string line;
  std::optional<std::string> path;
  while (in && std::getline(in, line)) {
    if (absl::StartsWith(line, "0::")) path = line.substr(3);
  }
  if (!path) {
    return absl::FailedPreconditionError(
        absl::StrCat("this process has no cgroup v2 (no \"0::\" line in ",
                     sources.self_cgroup, ")"));
  }
  const auto& [root, point] = *mount;
  // The mount shows the hierarchy from `root` down; our path is absolute.
  std::string rel = *path;
  if (root != "/") {
    if (!absl::StartsWith(rel, root) ||
        (rel.size() > root.size() && rel[root.size()] != '/')) {
      return absl::FailedPreconditionError(absl::StrCat(
          "this process's cgroup ", rel, " is outside the cgroup2 mount at ", point));
    }
    rel = rel.substr(root.size());
  }
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  return absl::StrCat(point, rel);
}

std::vector<pid_t> CgroupProcesses(const std::string& dir) {
  std::vector<pid_t> pids;
  std::ifstream in(dir + "/cgroup.procs");
  std::string line;
  while (in && std::getline(in, line)) {
    int pid;
    if (absl::SimpleAtoi(line, &pid) && pid > 0) pids.push_back(pid);
  }
  for (const std::string& sub : SubFolders(dir)) {
    for (pid_t pid : CgroupProcesses(sub)) pids.push_back(pid);
  }
  return pids;
}

absl::StatusOr<int> OpenCgroupProcs(const std::string& dir) {
  const std::string path = dir + "/cgroup.procs";
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(absl::StrCat("cannot open ", path), errno);
  return fd;
}

absl::Status MakeCgroup(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0) {
    return ErrnoError(absl::StrCat("cannot create cgroup ", dir), errno);
  }
  return absl::OkStatus();
}

absl::Status MoveCgroupProcesses(const std::string& from, const std::string& to) {
  // A process that forks while its siblings move leaves a child behind:
  // look again, a bounded number of times.
  for (int round = 0; round < 16; ++round) {
    std::vector<pid_t> pids = CgroupProcesses(from);
    if (pids.empty()) return absl::OkStatus();
    for (pid_t pid : pids) {
      absl::Status s = WriteFile(to + "/cgroup.procs", absl::StrCat(pid));
      if (!s.ok() && kill(pid, 0) == 0) return s;  // one that died need not move
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("processes of cgroup ", from, " keep forking; not all moved to ", to));
}

absl::StatusOr<int> KillCgroup(const std::string& dir, KillOptions options) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return 0;
    return ErrnoError(absl::StrCat("cannot look at cgroup ", dir), errno);
  }
  const int found = static_cast<int>(CgroupProcesses(dir).size());
  const std::string events = dir + "/cgroup.events";
  int fd = open(events.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(absl::StrCat("cannot open ", events), errno);
  const std::string kill_file = dir + "/cgroup.kill";
  const bool use_kill_file = options.use_kill_file && access(kill_file.c_str(), W_OK) == 0;
  const absl::Time deadline = absl::Now() + options.timeout;
  while (Populated(fd)) {
    if (use_kill_file) {
      (void)WriteFile(kill_file, "1");
    } else {
      KillEach(dir);
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      std::vector<pid_t> pids = CgroupProcesses(dir);
      close(fd);
      return absl::DeadlineExceededError(absl::StrCat(
          "cgroup ", dir, " still has ", pids.size(), " process(es) ",
          absl::FormatDuration(options.timeout), " after SIGKILL",
          pids.empty() ? "" : absl::StrCat(", e.g. pid ", pids.front())));
    }
    // cgroup.events signals a change of "populated" as POLLPRI; the bound
    // re-kills, in the fallback, what forked between freeze and kill.
    pollfd p{fd, POLLPRI, 0};
    (void)poll(&p, 1,
               static_cast<int>(absl::ToInt64Milliseconds(
                   std::min(left, absl::Milliseconds(100)))) + 1);
  }
  close(fd);
  if (absl::Status s = RemoveTree(dir); !s.ok()) return s;
  return found;
}

absl::StatusOr<std::unique_ptr<LauncherCgroup>> LauncherCgroup::Create(
    const std::string& name, bool kill_leftovers, const CgroupSources& sources) {
  auto own = FindOwnCgroup(sources);
  if (!own.ok()) return own.status();
  const std::string prefix = absl::StrCat(*own, "/elastrun-", name, "@");
  int leftovers = -1;
  for (const std::string& old : kill_leftovers ? SubFolders(*own) : std::vector<std::string>{}) {
    int pid = 0;
    if (!absl::StartsWith(old, prefix) || !absl::SimpleAtoi(old.substr(prefix.size()), &pid) ||
        IsLauncherAlive(pid)) {
      continue;
    }
    auto killed = KillCgroup(old);
    if (!killed.ok()) return killed.status();
    leftovers = std::max(leftovers, 0) + *killed;
  }
  const std::string dir = absl::StrCat(prefix, getpid());
  if (absl::Status s = MakeCgroup(dir); !s.ok()) return s;
  if (absl::Status s = ProbeMove(dir); !s.ok()) {
    (void)rmdir(dir.c_str());
    return s;
  }
  return std::unique_ptr<LauncherCgroup>(new LauncherCgroup(dir, leftovers));
}

LauncherCgroup::~LauncherCgroup() { (void)KillCgroup(dir_); }

std::string CgroupNamePart(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    if (!ok) c = '_';
  }
  return out;
}

}  // namespace elastrun::launcher
