#include "launcher/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "launcher/output.h"

namespace elastrun::launcher {
namespace {

constexpr int kTerminatingSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// epoll user data: small tags for our own fds, otherwise 1 + stream index.
constexpr uint64_t kSignalTag = ~uint64_t{0};
constexpr uint64_t kWakeTag = ~uint64_t{0} - 1;

int OpenLog(const std::string& path) {
  if (path.empty()) return -1;
  return open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  for (int s : kTerminatingSignals) sigaddset(&mask, s);
  if (pthread_sigmask(SIG_BLOCK, &mask, nullptr) != 0) return ErrnoError("sigmask");
  signal(SIGPIPE, SIG_IGN);
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return ErrnoError("PR_SET_CHILD_SUBREAPER");
  int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) return ErrnoError("signalfd");
  int wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  int efd = epoll_create1(EPOLL_CLOEXEC);
  if (wfd < 0 || efd < 0) {
    auto status = ErrnoError("eventfd/epoll");
    close(sfd);
    if (wfd >= 0) close(wfd);
    if (efd >= 0) close(efd);
    return status;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kSignalTag;
  epoll_ctl(efd, EPOLL_CTL_ADD, sfd, &ev);
  ev.data.u64 = kWakeTag;
  epoll_ctl(efd, EPOLL_CTL_ADD, wfd, &ev);
  return std::unique_ptr<Agent>(
      new Agent(options, NewPosixProcessControl(), efd, sfd, wfd));
}

Agent::Agent(AgentOptions options, std::unique_ptr<ProcessControl> processes,
             int epoll_fd, int signal_fd, int wake_fd)
    : options_(options),
      processes_(std::move(processes)),
      epoll_fd_(epoll_fd),
      signal_fd_(signal_fd),
      wake_fd_(wake_fd) {}

Agent::~Agent() {
  close(epoll_fd_);
  close(signal_fd_);
  close(wake_fd_);
}

void Agent::RequestStop(int sig) {
  int expected = 0;
  requested_stop_.compare_exchange_strong(expected, sig);
  uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof one);
  (void)n;
}

void Agent::ReapChildren(Supervisor& supervisor) {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;  // 0: none ready; -1 (ECHILD): no children left
    supervisor.OnExit(pid, status, absl::Now());
  }
}

absl::StatusOr<AttemptOutcome> Agent::RunAttempt(AttemptSpec spec) {
  if (spec.outputs.size() != spec.workers.size()) {
    return absl::InvalidArgumentError("one WorkerOutput per worker is required");
  }
  Supervisor supervisor(processes_.get(), Supervisor::Options{options_.grace});
  AttemptOutcome outcome;

  // Open the log files before starting anything, so a bad --log-dir is an
  // error before any worker runs.
  struct Stream {
    int fd = -1;
    std::unique_ptr<OutputStream> out;
  };
  std::vector<Stream> streams;
  std::vector<int> log_fds;
  for (const WorkerOutput& o : spec.outputs) {
    for (const std::string* path : {&o.stdout_log, &o.stderr_log}) {
      int fd = OpenLog(*path);
      if (!path->empty() && fd < 0) {
        auto status = absl::FailedPreconditionError(
            absl::StrCat("cannot write log file ", *path, ": ", std::strerror(errno)));
        for (int f : log_fds) close(f);
        return status;
      }
      log_fds.push_back(fd);
    }
  }

  auto spawned = supervisor.Start(std::move(spec.workers), absl::Now());
  if (!spawned.ok()) {
    outcome.spawn_error = spawned.status();
    for (int f : log_fds) {
      if (f >= 0) close(f);
    }
    log_fds.clear();
  } else {
    for (size_t i = 0; i < spawned->size(); ++i) {
      const SpawnedProcess& p = (*spawned)[i];
      const WorkerOutput& o = spec.outputs[i];
      const int fds[2] = {p.stdout_fd, p.stderr_fd};
      const bool show[2] = {o.stdout_to_console, o.stderr_to_console};
      const int console[2] = {options_.console_stdout_fd, options_.console_stderr_fd};
      for (int k = 0; k < 2; ++k) {
        Stream s;
        s.fd = fds[k];
        s.out = std::make_unique<OutputStream>(log_fds[2 * i + k],
                                               show[k] ? console[k] : -1, o.prefix);
        log_fds[2 * i + k] = -1;  // owned by the stream now
        if (s.fd >= 0) {
          epoll_event ev{};
          ev.events = EPOLLIN;
          ev.data.u64 = streams.size();
          epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, s.fd, &ev);
        }
        streams.push_back(std::move(s));
      }
    }
  }

  char buf[65536];
  auto drain = [&](Stream& s, bool final) {
    while (s.fd >= 0) {
      ssize_t n = read(s.fd, buf, sizeof buf);
      if (n > 0) {
        s.out->Write(absl::string_view(buf, static_cast<size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN && !final) return;
      // EOF, an error, or the final drain of a pipe still held open by a
      // leftover process: this stream is finished.
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s.fd, nullptr);
      close(s.fd);
      s.fd = -1;
      s.out->Close();
    }
  };

  // A stop requested before this attempt began applies to it.
  if (int sig = requested_stop_.load(); sig != 0) supervisor.Stop(sig, absl::Now());
  if (int sig = received_signal_.load(); sig != 0) supervisor.Stop(sig, absl::Now());

  epoll_event events[32];
  while (supervisor.state() != Supervisor::State::kDone) {
    int timeout_ms = -1;
    if (auto deadline = supervisor.NextDeadline()) {
      timeout_ms = static_cast<int>(
          absl::ToInt64Milliseconds(absl::Ceil(*deadline - absl::Now(), absl::Milliseconds(1))));
      if (timeout_ms < 0) timeout_ms = 0;
    }
    int n = epoll_wait(epoll_fd_, events, 32, timeout_ms);
    if (n < 0 && errno != EINTR) return ErrnoError("epoll_wait");
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kSignalTag) {
        signalfd_siginfo si;
        bool child = false;
        while (read(signal_fd_, &si, sizeof si) == sizeof si) {
          const int sig = static_cast<int>(si.ssi_signo);
          if (sig == SIGCHLD) {
            child = true;
            continue;
          }
          int expected = 0;
          if (received_signal_.compare_exchange_strong(expected, sig)) {
            supervisor.Stop(sig, absl::Now());
          } else {
            supervisor.Stop(SIGKILL, absl::Now());  // asked twice: no more grace
          }
        }
        if (child) ReapChildren(supervisor);
      } else if (tag == kWakeTag) {
        uint64_t v;
        while (read(wake_fd_, &v, sizeof v) > 0) {
        }
        if (int sig = requested_stop_.load(); sig != 0) supervisor.Stop(sig, absl::Now());
      } else if (tag < streams.size()) {
        drain(streams[tag], /*final=*/false);
      }
    }
    supervisor.OnTick(absl::Now());
  }
  for (Stream& s : streams) drain(s, /*final=*/true);
  streams.clear();
  for (int f : log_fds) {
    if (f >= 0) close(f);
  }

  requested_stop_.store(0);  // a stop request ends this attempt only
  outcome.exits = supervisor.exits();
  outcome.first_failure = supervisor.first_failure();
  outcome.leftovers = supervisor.leftovers();
  if (!outcome.spawn_error.ok()) {
    outcome.kind = AttemptOutcome::Kind::kFailed;
  } else if (supervisor.first_failure()) {
    outcome.kind = AttemptOutcome::Kind::kFailed;
  } else if (supervisor.stop_signal() != 0) {
    outcome.kind = AttemptOutcome::Kind::kStopped;
    outcome.stop_signal = supervisor.stop_signal();
  } else {
    outcome.kind = supervisor.succeeded() ? AttemptOutcome::Kind::kSucceeded
                                          : AttemptOutcome::Kind::kFailed;
  }
  return outcome;
}

}  // namespace elastrun::launcher
