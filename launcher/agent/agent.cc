#include "launcher/agent/agent.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/worker_env.h"
#include "launcher/agent/output.h"
#include "launcher/agent/port.h"

namespace elastrun::launcher {
namespace {

constexpr int kTerminatingSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(
    AgentOptions options, std::unique_ptr<ProcessControl> processes) {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  for (int s : kTerminatingSignals) sigaddset(&mask, s);
  if (pthread_sigmask(SIG_BLOCK, &mask, nullptr) != 0) return ErrnoError("sigmask");
  signal(SIGPIPE, SIG_IGN);
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return ErrnoError("PR_SET_CHILD_SUBREAPER");
  auto poller = Poller::Create();
  if (!poller.ok()) return poller.status();
  std::unique_ptr<ProgressSocket> progress;
  if (!options.progress_socket.empty()) {
    auto bound = ProgressSocket::Bind(options.progress_socket);
    if (!bound.ok()) return bound.status();
    progress = *std::move(bound);
  }
  int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) return ErrnoError("signalfd");
  int wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wfd < 0) {
    auto status = ErrnoError("eventfd");
    close(sfd);
    return status;
  }
  if (processes == nullptr) processes = NewPosixProcessControl();
  return std::unique_ptr<Agent>(new Agent(std::move(options), std::move(processes),
                                          *std::move(poller), sfd, wfd, std::move(progress)));
}

Agent::Agent(AgentOptions options, std::unique_ptr<ProcessControl> processes,
             std::unique_ptr<Poller> poller, int signal_fd, int wake_fd,
             std::unique_ptr<ProgressSocket> progress)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &RealClock()),
      processes_(std::move(processes)),
      poller_(std::move(poller)),
      signal_fd_(signal_fd),
      wake_fd_(wake_fd),
      progress_(std::move(progress)) {
  if (!options_.stack_tool.empty()) {
    const char* path = getenv("PATH");
    auto tool =
        ResolveProgram(options_.stack_tool, path != nullptr ? path : "/usr/bin:/bin");
    if (tool.ok() && access(tool->c_str(), X_OK) == 0) stack_tool_ = *tool;
  }
  if (options_.standby) {
    standbys_ = std::make_unique<StandbyPool>(processes_.get(), options_.cgroup);
  }
  // Fresh descriptors on a fresh epoll set: these cannot fail.
  (void)poller_->Watch(signal_fd_, [this] { OnSignals(); });
  (void)poller_->Watch(wake_fd_, [this] {
    uint64_t v;
    while (read(wake_fd_, &v, sizeof v) > 0) {
    }
    TakeRequests();
  });
  if (progress_ != nullptr) {
    (void)poller_->Watch(progress_->fd(), [this] { ReadProgress(); });
  }
}

Agent::~Agent() {
  runs_.clear();
  standbys_.reset();
  poller_->Unwatch(signal_fd_);
  poller_->Unwatch(wake_fd_);
  if (progress_ != nullptr) poller_->Unwatch(progress_->fd());
  close(signal_fd_);
  close(wake_fd_);
}

Agent::AttemptId Agent::Start(AttemptSpec spec, DoneCallback done) {
  AttemptId id;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
    live_.insert(id);
    starts_.push_back(Request{id, std::move(spec), std::move(done)});
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  return id;
}

void Agent::Stop(AttemptId id, int sig) {
  {
    absl::MutexLock lock(&mu_);
    if (live_.count(id) == 0) return;  // ended: a stale stop reaches nothing
    stops_.emplace_back(id, sig);
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void Agent::Quit() {
  {
    absl::MutexLock lock(&mu_);
    quit_ = true;
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

size_t Agent::active() const {
  absl::MutexLock lock(&mu_);
  return live_.size();
}

void Agent::TakeRequests() {
  std::deque<Request> starts;
  std::vector<std::pair<AttemptId, int>> stops;
  {
    absl::MutexLock lock(&mu_);
    starts.swap(starts_);
    stops.swap(stops_);
  }
  for (Request& r : starts) Begin(std::move(r));
  for (const auto& [id, sig] : stops) {
    auto it = runs_.find(id);
    if (it != runs_.end()) it->second.run->Stop(sig);
  }
}

void Agent::Begin(Request request) {
  AttemptEnv env;
  env.processes = processes_.get();
  env.poller = poller_.get();
  env.clock = clock_;
  env.standbys = standbys_.get();
  env.is_listening = options_.is_listening ? options_.is_listening : IsListening;
  env.grace = options_.grace;
  env.console_stdout_fd = options_.console_stdout_fd;
  env.console_stderr_fd = options_.console_stderr_fd;
  env.on_output_line = options_.on_output_line;
  if (!options_.cgroup.empty()) env.cgroup = absl::StrCat(options_.cgroup, "/attempt-", request.id);
  env.proc_reader = options_.proc_reader;
  env.stack_tool = stack_tool_;
  auto run = std::make_unique<AttemptRun>(std::move(env), std::move(request.spec));
  if (absl::Status s = run->Begin(); !s.ok()) {
    Ended(request.id);
    request.done(s);
    return;
  }
  // A launcher that was told to stop stops what it starts, too.
  if (int sig = received_signal_.load(); sig != 0) run->Stop(sig);
  runs_[request.id] = Active{std::move(run), std::move(request.done)};
}

void Agent::OnSignals() {
  signalfd_siginfo si;
  bool child = false;
  while (read(signal_fd_, &si, sizeof si) == sizeof si) {
    const int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) {
      child = true;
      continue;
    }
    int expected = 0;
    // Asked twice: no more grace.
    const int forward = received_signal_.compare_exchange_strong(expected, sig) ? sig : SIGKILL;
    for (auto& [id, active] : runs_) active.run->Stop(forward);
    if (options_.on_signal) options_.on_signal(sig);
  }
  if (!child) return;
  for (auto& [id, active] : runs_) active.run->OnChildSignal();
  if (standbys_ != nullptr) standbys_->ReapDead();
  scan_orphans_ = true;
}

void Agent::ReapOrphans() {
  for (;;) {
    const pid_t pid = processes_->PeekExited();
    if (pid <= 0) {
      scan_orphans_ = false;
      return;
    }
    bool owned = standbys_ != nullptr && standbys_->Owns(pid);
    for (const auto& [id, active] : runs_) owned = owned || active.run->Owns(pid);
    // An owned one hides the others until its owner reaps it (its exit
    // descriptor is ready: the next Poll does not wait); look again then.
    if (owned) return;
    (void)processes_->ReapExited(pid);
  }
}

AttemptRun* Agent::FindWorker(absl::string_view secret, size_t* worker) {
  for (auto& [id, active] : runs_) {
    if (auto i = active.run->WorkerWithSecret(secret)) {
      *worker = *i;
      return active.run.get();
    }
  }
  return nullptr;
}

void Agent::Drop(absl::string_view what) {
  if (dropped_.fetch_add(1) != 0) return;
  WriteAll(options_.console_stderr_fd,
           absl::StrCat("elastrun: dropped a ", what,
                        " on the agent socket: its secret is no live worker's (",
                        env::kAgentSecret, "); further ones are only counted\n"));
}

void Agent::ReadProgress() {
  if (progress_ == nullptr) return;
  // Only a live worker's datagrams pass, as the job, rank and node its
  // secret was made for: a process that is not a worker (or a worker posing
  // as another rank, or another job's) can neither post progress nor
  // release a barrier.
  auto on_progress = [this](const ProgressReport& report) {
    size_t i = 0;
    AttemptRun* run = FindWorker(report.secret, &i);
    if (run == nullptr) return Drop("progress report");
    ProgressReport checked = report;
    checked.job_id = run->job_id();
    checked.rank = run->rank_of(i);
    run->OnProgress(i, checked);
    // A beat says only that the worker is alive: the step and metrics
    // shown stay those of its last step report.
    if (options_.on_progress && checked.beat == 0) options_.on_progress(checked);
  };
  auto on_barrier = [this](const BarrierArrival& arrival,
                           std::function<void(const absl::Status&)> reply) {
    size_t i = 0;
    AttemptRun* run = FindWorker(arrival.secret, &i);
    if (run == nullptr) return Drop("barrier arrival");
    BarrierArrival checked = arrival;
    checked.job_id = run->job_id();
    checked.rank = run->rank_of(i);
    checked.local_world_size = run->local_world_size();
    if (!options_.on_barrier) {
      return reply(absl::UnimplementedError("this launcher relays no barriers"));
    }
    options_.on_barrier(checked, std::move(reply));
  };
  progress_->Read(on_progress, on_barrier);
}

void Agent::Ended(AttemptId id) {
  absl::MutexLock lock(&mu_);
  live_.erase(id);
}

void Agent::EndFinished() {
  std::vector<std::pair<DoneCallback, AttemptOutcome>> ended;
  for (auto it = runs_.begin(); it != runs_.end();) {
    if (!it->second.run->done()) {
      ++it;
      continue;
    }
    ended.emplace_back(std::move(it->second.done), it->second.run->Finish());
    Ended(it->first);
    it = runs_.erase(it);
  }
  if (ended.empty()) return;
  // Reports sent just before the workers exited are delivered before their
  // attempt's end is.
  ReadProgress();
  for (auto& [done, outcome] : ended) done(std::move(outcome));
}

absl::Status Agent::Poll(absl::Duration timeout) {
  TakeRequests();
  const absl::Time now = clock_->Now();
  absl::Duration wait = timeout;
  for (const auto& [id, active] : runs_) {
    if (active.run->done()) wait = absl::ZeroDuration();
    if (auto deadline = active.run->NextDeadline()) wait = std::min(wait, *deadline - now);
  }
  wait = std::max(wait, absl::ZeroDuration());
  auto ran = poller_->Wait(wait);
  if (!ran.ok()) return ran.status();
  for (auto& [id, active] : runs_) active.run->OnTick();
  if (scan_orphans_) ReapOrphans();
  EndFinished();
  return absl::OkStatus();
}

absl::Status Agent::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (quit_ && live_.empty()) return absl::OkStatus();
    }
    if (absl::Status s = Poll(absl::InfiniteDuration()); !s.ok()) return s;
  }
}

absl::StatusOr<AttemptOutcome> Agent::RunAttempt(AttemptSpec spec) {
  std::optional<absl::StatusOr<AttemptOutcome>> result;
  Start(std::move(spec),
        [&result](absl::StatusOr<AttemptOutcome> outcome) { result = std::move(outcome); });
  while (!result.has_value()) {
    if (absl::Status s = Poll(absl::InfiniteDuration()); !s.ok()) return s;
  }
  return *std::move(result);
}

}  // namespace elastrun::launcher
