#include "launcher/agent/supervisor.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "absl/strings/str_cat.h"

namespace elastrun::launcher {

namespace {
// How long a SIGKILLed group may take to be reaped before we stop waiting.
constexpr absl::Duration kReapLimit = absl::Seconds(10);
}  // namespace

std::string DescribeExit(const WorkerExit& exit) {
  if (exit.signal != 0) {
    const char* abbrev = sigabbrev_np(exit.signal);
    return absl::StrCat("signal ", exit.signal, " (SIG", abbrev ? abbrev : "?", ")");
  }
  return absl::StrCat("exit code ", exit.exit_code);
}

std::string DescribeUnreaped(const std::vector<WorkerExit>& unreaped) {
  if (unreaped.empty()) return "";
  std::string who;
  for (const WorkerExit& w : unreaped) {
    absl::StrAppend(&who, who.empty() ? "" : ", ", "rank ", w.rank, " (pid ", w.pid, ")");
  }
  return absl::StrCat(
      who, " did not end within ", absl::FormatDuration(kReapLimit),
      " of SIGKILL (uninterruptible sleep, D state: a hung file system or device?); the "
      "attempt ended without ",
      unreaped.size() == 1 ? "it" : "them",
      ": its slots are free again, but the process may still hold memory or devices");
}

Supervisor::Supervisor(ProcessControl* processes, Options options)
    : processes_(processes), options_(options) {}

absl::StatusOr<std::vector<SpawnedProcess>> Supervisor::Start(
    std::vector<WorkerSpec> workers, absl::Time now) {
  if (state_ != State::kIdle) {
    return absl::FailedPreconditionError("a supervisor runs one attempt only");
  }
  if (workers.empty()) return absl::InvalidArgumentError("no workers to start");
  workers_ = std::move(workers);
  pids_.assign(workers_.size(), -1);
  state_ = State::kRunning;
  std::vector<SpawnedProcess> spawned;
  for (size_t i = 0; i < workers_.size(); ++i) {
    workers_[i].process.process_group = pgid_;  // 0 for the first: a new group
    auto p = processes_->Spawn(workers_[i].process);
    if (!p.ok()) {
      if (running_ > 0) {
        BeginStop(SIGKILL, now);
      } else {
        state_ = State::kDone;
      }
      return absl::Status(p.status().code(),
                          absl::StrCat("local rank ", workers_[i].local_rank, ": ",
                                       p.status().message()));
    }
    if (pgid_ == 0) pgid_ = p->pid;
    pids_[i] = p->pid;
    ++running_;
    spawned.push_back(*p);
  }
  return spawned;
}

void Supervisor::Adopt(std::vector<WorkerSpec> workers, const std::vector<pid_t>& pids,
                       pid_t pgid) {
  workers_ = std::move(workers);
  pids_ = pids;
  pgid_ = pgid;
  running_ = static_cast<int>(pids_.size());
  state_ = State::kRunning;
}

void Supervisor::OnExit(pid_t pid, int wait_status, absl::Time now) {
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (pids_[i] != pid) continue;
    pids_[i] = -1;
    --running_;
    WorkerExit exit;
    exit.local_rank = workers_[i].local_rank;
    exit.rank = workers_[i].rank;
    exit.pid = pid;
    exit.time = now;
    if (WIFSIGNALED(wait_status)) {
      exit.signal = WTERMSIG(wait_status);
    } else {
      exit.exit_code = WEXITSTATUS(wait_status);
    }
    exits_.push_back(exit);
    if (first_failure_ && first_failure_->hung && first_failure_->pid == pid &&
        !exit.ok()) {
      first_failure_->exit_code = exit.exit_code;  // how the hung one ended
      first_failure_->signal = exit.signal;
    }
    // A worker failing while the group runs is the root cause; exits after a
    // stop began are consequences of the stop.
    if (!exit.ok() && state_ == State::kRunning) {
      if (!first_failure_) first_failure_ = exit;  // else a hang was declared first
      BeginStop(SIGTERM, now);
    }
    break;
  }
  MaybeFinish(now);
}

void Supervisor::DeclareHung(size_t index, int64_t step, absl::Duration idle,
                             absl::Time now) {
  if (state_ != State::kRunning || first_failure_ || index >= workers_.size()) return;
  WorkerExit hung;
  hung.local_rank = workers_[index].local_rank;
  hung.rank = workers_[index].rank;
  hung.pid = pids_[index];
  hung.time = now;
  // Until it is reaped: what a shell shows for a process stopped by the
  // launcher, so the run never exits 0 for a hang.
  hung.signal = SIGTERM;
  hung.hung = true;
  hung.hung_step = step;
  hung.hung_for = idle;
  first_failure_ = hung;
}

void Supervisor::Stop(int sig, absl::Time now) {
  if (state_ == State::kDone || state_ == State::kIdle) return;
  if (state_ == State::kStopping) {
    if (sig == SIGKILL && !killed_) {
      killed_ = true;
      kill_at_.reset();
      give_up_at_ = now + kReapLimit;
      (void)processes_->SignalGroup(pgid_, SIGKILL);
    }
    return;
  }
  BeginStop(sig, now);
}

void Supervisor::BeginStop(int sig, absl::Time now, bool cleanup) {
  if (stop_signal_ == 0 && !cleanup) stop_signal_ = sig;
  state_ = State::kStopping;
  (void)processes_->SignalGroup(pgid_, sig);
  if (sig == SIGKILL) {
    killed_ = true;
    give_up_at_ = now + kReapLimit;
  } else {
    kill_at_ = now + options_.grace;
  }
}

void Supervisor::OnTick(absl::Time now) {
  if (kill_at_ && now >= *kill_at_) {
    kill_at_.reset();
    killed_ = true;
    give_up_at_ = now + kReapLimit;
    (void)processes_->SignalGroup(pgid_, SIGKILL);
  }
  if (give_up_at_ && now >= *give_up_at_) {
    // Workers still there past SIGKILL's reap limit cannot die now
    // (uninterruptible sleep): the attempt ends without them.
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (pids_[i] < 0) continue;
      WorkerExit& w = unreaped_.emplace_back();
      w.local_rank = workers_[i].local_rank;
      w.rank = workers_[i].rank;
      w.pid = pids_[i];
      w.signal = SIGKILL;
      w.time = now;
      pids_[i] = -1;
    }
    running_ = 0;
    leftovers_ = !unreaped_.empty() || processes_->GroupExists(pgid_);
    state_ = State::kDone;
    give_up_at_.reset();
    return;
  }
  MaybeFinish(now);
}

void Supervisor::MaybeFinish(absl::Time now) {
  if (state_ == State::kDone || state_ == State::kIdle || running_ > 0) return;
  if (pgid_ != 0 && processes_->GroupExists(pgid_)) {
    // Every worker is gone but something they started lives on in the
    // group: stop it too, so no process outlives its attempt.
    if (state_ == State::kRunning) BeginStop(SIGTERM, now, /*cleanup=*/true);
    return;
  }
  state_ = State::kDone;
  kill_at_.reset();
  give_up_at_.reset();
}

std::optional<absl::Time> Supervisor::NextDeadline() const {
  if (kill_at_) return kill_at_;
  return give_up_at_;
}

bool Supervisor::succeeded() const {
  if (state_ != State::kDone || stop_signal_ != 0 || first_failure_) return false;
  for (const WorkerExit& e : exits_) {
    if (!e.ok()) return false;
  }
  return exits_.size() == workers_.size();
}

}  // namespace elastrun::launcher
