#include "launcher/agent/process_set.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace elastrun::launcher {

ProcessSet::ProcessSet(ProcessControl* processes, Poller* poller)
    : processes_(processes), poller_(poller) {}

ProcessSet::~ProcessSet() {
  for (const auto& [pid, fd] : exit_fds_) {
    if (fd < 0) continue;
    poller_->Unwatch(fd);
    close(fd);
  }
}

absl::Status ProcessSet::Add(pid_t pid, pid_t pgid) {
  if (pgid > 0) groups_.insert(pgid);
  auto fd = processes_->OpenExitFd(pid);
  exit_fds_[pid] = fd.ok() ? *fd : -1;
  if (!fd.ok()) return fd.status();
  if (absl::Status s = poller_->Watch(*fd, [this, pid] { OnExitFd(pid); }); !s.ok()) {
    close(*fd);
    exit_fds_[pid] = -1;
    return s;
  }
  return absl::OkStatus();
}

void ProcessSet::AddGroup(pid_t pgid) {
  if (pgid > 0) groups_.insert(pgid);
}

std::vector<std::pair<pid_t, int>> ProcessSet::TakeExits() {
  auto severity = [](int status) {
    if (WIFSIGNALED(status)) return 0;
    return WEXITSTATUS(status) != 0 ? 1 : 2;
  };
  std::vector<std::pair<pid_t, int>> exits = std::move(reaped_);
  reaped_.clear();
  std::stable_sort(exits.begin(), exits.end(), [&](const auto& a, const auto& b) {
    return severity(a.second) < severity(b.second);
  });
  return exits;
}

void ProcessSet::OnExitFd(pid_t pid) {
  auto reaped = processes_->ReapExited(pid);
  if (!reaped.empty()) {
    Reaped(reaped.front().first, reaped.front().second);
    return;
  }
  // Readable but nothing to reap: another path (ReapGroups) got it first.
  auto it = exit_fds_.find(pid);
  if (it != exit_fds_.end() && it->second >= 0) {
    poller_->Unwatch(it->second);
    close(it->second);
    it->second = -1;
  }
}

void ProcessSet::ReapGroups() {
  for (pid_t pgid : groups_) {
    for (const auto& [pid, status] : processes_->ReapExited(-pgid)) Reaped(pid, status);
  }
  // A worker that left its group (setsid) is still reaped by its pid.
  std::vector<pid_t> without_fd;
  for (const auto& [pid, fd] : exit_fds_) {
    if (fd < 0) without_fd.push_back(pid);
  }
  for (pid_t pid : without_fd) {
    for (const auto& [p, status] : processes_->ReapExited(pid)) Reaped(p, status);
  }
}

void ProcessSet::Reaped(pid_t pid, int status) {
  auto it = exit_fds_.find(pid);
  if (it != exit_fds_.end()) {
    if (it->second >= 0) {
      poller_->Unwatch(it->second);
      close(it->second);
    }
    exit_fds_.erase(it);
  }
  reaped_.emplace_back(pid, status);
}

}  // namespace elastrun::launcher
