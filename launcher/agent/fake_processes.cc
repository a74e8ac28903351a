#include "launcher/agent/fake_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace elastrun::launcher {
namespace {

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

FakeProcesses::~FakeProcesses() {
  for (auto& [pid, p] : procs_) {
    CloseFd(p.stdout_w);
    CloseFd(p.stderr_w);
    for (int& fd : p.passed) CloseFd(fd);
    for (int& fd : p.exit_fds) CloseFd(fd);
  }
}

absl::StatusOr<SpawnedProcess> FakeProcesses::Spawn(const ProcessSpec& spec) {
  if (spec.argv.empty() || spec.argv[0] == "missing") {
    return absl::FailedPreconditionError("cannot run 'missing': not found");
  }
  Proc p;
  p.pid = next_pid_++;
  p.pgid = spec.process_group == 0 ? p.pid : spec.process_group;
  p.spec = spec;
  SpawnedProcess out;
  out.pid = p.pid;
  if (spec.capture_output) {
    int o[2], e[2];
    if (pipe2(o, O_CLOEXEC) != 0 || pipe2(e, O_CLOEXEC) != 0) {
      return absl::InternalError("pipe");
    }
    for (int fd : {o[0], e[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    out.stdout_fd = o[0];
    out.stderr_fd = e[0];
    p.stdout_w = o[1];
    p.stderr_w = e[1];
  }
  for (const auto& [from, to] : spec.pass_fds) p.passed.push_back(dup(from));
  order_.push_back(p.pid);
  procs_[p.pid] = std::move(p);
  return out;
}

absl::Status FakeProcesses::SignalProcess(pid_t pid, int sig) {
  process_signals_.emplace_back(pid, sig);
  return absl::OkStatus();
}

absl::Status FakeProcesses::SignalGroup(pid_t pgid, int sig) {
  signals_.emplace_back(pgid, sig);
  if (obeyed.count(sig) == 0 && sig != SIGKILL) return absl::OkStatus();
  std::vector<pid_t> dying;
  for (const auto& [pid, p] : procs_) {
    if (p.pgid == pgid && !p.exited && unkillable.count(pid) == 0) dying.push_back(pid);
  }
  for (pid_t pid : dying) Exit(pid, KilledBy(sig));
  return absl::OkStatus();
}

bool FakeProcesses::GroupExists(pid_t pgid) {
  for (const auto& [pid, p] : procs_) {
    if (p.pgid == pgid && !p.reaped) return true;
  }
  return false;
}

absl::StatusOr<int> FakeProcesses::OpenExitFd(pid_t pid) {
  auto it = procs_.find(pid);
  if (it == procs_.end() || it->second.reaped) return absl::NotFoundError("no such process");
  int fd = eventfd(it->second.exited ? 1 : 0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return absl::InternalError("eventfd");
  it->second.exit_fds.push_back(dup(fd));
  return fd;
}

std::vector<std::pair<pid_t, int>> FakeProcesses::ReapExited(pid_t who) {
  std::vector<std::pair<pid_t, int>> reaped;
  for (auto& [pid, p] : procs_) {
    const bool match = who > 0 ? pid == who : p.pgid == -who;
    if (!match || !p.exited || p.reaped) continue;
    p.reaped = true;
    reaped.emplace_back(pid, p.status);
  }
  return reaped;
}

pid_t FakeProcesses::PeekExited() {
  for (const auto& [pid, p] : procs_) {
    if (p.exited && !p.reaped) return pid;
  }
  return 0;
}

void FakeProcesses::Exit(pid_t pid, int wait_status) {
  Proc& p = procs_.at(pid);
  if (p.exited) return;
  p.exited = true;
  p.status = wait_status;
  CloseFd(p.stdout_w);
  CloseFd(p.stderr_w);
  for (int& fd : p.passed) CloseFd(fd);
  const uint64_t one = 1;
  for (int fd : p.exit_fds) (void)!write(fd, &one, sizeof one);
  kill(getpid(), SIGCHLD);  // as the kernel tells a parent
}

pid_t FakeProcesses::AddStray(pid_t pgid) {
  const pid_t pid = next_pid_++;
  procs_[pid].pid = pid;
  procs_[pid].pgid = pgid;
  return pid;
}

}  // namespace elastrun::launcher
