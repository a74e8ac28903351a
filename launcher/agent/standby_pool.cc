#include "launcher/agent/standby_pool.h"

#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/worker_env.h"
#include "launcher/agent/cgroup.h"

namespace elastrun::launcher {
namespace {

// Niceness of standby workers while they start, so their start-up yields
// the CPU to the running attempt; set back to 0 on activation. Only used
// where the launcher may raise priority again (root or RLIMIT_NICE), so a
// user's activated workers never stay behind at a lower priority.
constexpr int kStandbyNice = 10;

int StandbyNiceness() {
  rlimit limit{};
  const bool may_raise = geteuid() == 0 ||
                         (getrlimit(RLIMIT_NICE, &limit) == 0 && limit.rlim_cur >= 20);
  return may_raise ? kStandbyNice : 0;
}

}  // namespace

bool StandbySocket(int fds[2]) {
  return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0;
}

StandbyPool::~StandbyPool() { Discard(); }

int StandbyPool::MakeSetCgroup() {
  if (cgroup_.empty()) return -1;
  const std::string dir = absl::StrCat(cgroup_, "/standby-", ++sets_made_);
  if (!MakeCgroup(dir).ok()) return -1;  // then a plain process group
  auto fd = OpenCgroupProcs(dir);
  if (!fd.ok()) {
    (void)KillCgroup(dir);
    return -1;
  }
  set_.cgroup = dir;
  return *fd;
}

void StandbyPool::Fill(const std::vector<std::string>& argv,
                       const std::vector<std::string>& env, size_t n,
                       const std::string& cwd,
                       const std::optional<ProcessCredentials>& run_as) {
  if (!empty()) return;
  const int cgroup_fd = MakeSetCgroup();
  for (size_t i = 0; i < n; ++i) {
    int fds[2];
    if (!StandbySocket(fds)) break;
    ProcessSpec p;
    p.argv = argv;
    p.env = env;
    p.env.push_back(absl::StrCat(env::kStandbyFd, "=", fds[1]));
    p.env.push_back(absl::StrCat(env::kStandbyLocalRank, "=", i));
    p.pass_fds = {{fds[1], fds[1]}};
    p.process_group = set_.pgid;
    p.niceness = StandbyNiceness();
    p.cgroup_procs_fd = cgroup_fd;
    p.cwd = cwd;
    p.run_as = run_as;
    auto spawned = processes_->Spawn(p);
    close(fds[1]);
    if (!spawned.ok()) {
      close(fds[0]);
      break;
    }
    if (set_.pgid == 0) set_.pgid = spawned->pid;
    set_.workers.push_back({spawned->pid, fds[0], spawned->stdout_fd, spawned->stderr_fd});
  }
  if (cgroup_fd >= 0) close(cgroup_fd);
  if (set_.workers.size() != n) {
    Discard();
    return;
  }
  argv_ = argv;
  env_ = env;
  cwd_ = cwd;
  run_as_ = run_as;
}

std::optional<StandbySet> StandbyPool::Take(
    const std::vector<std::string>& argv, const std::vector<std::string>& env, size_t n,
    const std::string& cwd, const std::optional<ProcessCredentials>& run_as) {
  ReapDead();  // a standby may have died since the last look
  if (set_.workers.size() != n || argv != argv_ || env != env_ || cwd != cwd_ ||
      run_as != run_as_) {
    return std::nullopt;
  }
  StandbySet taken = std::move(set_);
  set_ = StandbySet{};
  return taken;
}

bool StandbyPool::Owns(pid_t pid) const {
  for (const StandbyWorker& s : set_.workers) {
    if (s.pid == pid) return true;
  }
  return false;
}

void StandbyPool::ReapDead() {
  if (set_.pgid == 0) return;
  bool died = false;
  for (const auto& [pid, status] : processes_->ReapExited(-set_.pgid)) {
    for (StandbyWorker& s : set_.workers) {
      if (s.pid == pid) {
        s.pid = -1;
        died = true;
      }
    }
  }
  // One that died before it was needed makes its set useless: the next
  // attempt starts fresh processes.
  if (died) Discard();
}

void StandbyPool::Discard() {
  for (StandbyWorker& s : set_.workers) {
    for (int fd : {s.control, s.stdout_fd, s.stderr_fd}) {
      if (fd >= 0) close(fd);
    }
  }
  // Closing the sockets tells them to exit; SIGKILL makes sure.
  if (set_.pgid != 0) (void)processes_->SignalGroup(set_.pgid, SIGKILL);
  for (StandbyWorker& s : set_.workers) {
    if (s.pid <= 0) continue;
    // Quick: the process was just SIGKILLed. By its pid only: other
    // attempts' children are theirs to reap.
    int status;
    while (waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (set_.pgid != 0) (void)processes_->ReapExited(-set_.pgid);
  // Whatever the standbys started, too.
  if (!set_.cgroup.empty()) (void)KillCgroup(set_.cgroup);
  set_ = StandbySet{};
  argv_.clear();
  env_.clear();
  cwd_.clear();
  run_as_.reset();
}

}  // namespace elastrun::launcher
