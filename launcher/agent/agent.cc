#include "launcher/agent/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/standby.h"
#include "common/worker_env.h"
#include "launcher/agent/output.h"
#include "launcher/agent/port.h"

namespace elastrun::launcher {
namespace {

constexpr int kTerminatingSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// epoll user data: tags for our own fds, kControlBit | worker index for a
// worker's standby socket, otherwise the output stream index.
constexpr uint64_t kSignalTag = ~uint64_t{0};
constexpr uint64_t kWakeTag = ~uint64_t{0} - 1;
constexpr uint64_t kProgressTag = ~uint64_t{0} - 2;
constexpr uint64_t kControlBit = uint64_t{1} << 62;

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

// A socket pair for the standby protocol: {ours, the worker's}.
bool StandbySocket(int fds[2]) {
  return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0;
}

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
  int pfd = -1;
  if (!options.progress_socket.empty()) {
    sockaddr_un addr{};
    if (options.progress_socket.size() >= sizeof addr.sun_path) {
      close(sfd);
      close(wfd);
      close(efd);
      return absl::InvalidArgumentError(absl::StrCat(
          "agent socket path '", options.progress_socket, "' is longer than ",
          sizeof addr.sun_path - 1, " bytes; use a shorter --log-dir"));
    }
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, options.progress_socket.data(), options.progress_socket.size());
    unlink(options.progress_socket.c_str());  // a socket left by an earlier run
    pfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (pfd < 0 || bind(pfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        chmod(options.progress_socket.c_str(), 0600) != 0) {
      auto status = ErrnoError(absl::StrCat("agent socket ", options.progress_socket));
      if (pfd >= 0) close(pfd);
      close(sfd);
      close(wfd);
      close(efd);
      return status;
    }
    ev.data.u64 = kProgressTag;
    epoll_ctl(efd, EPOLL_CTL_ADD, pfd, &ev);
  }
  return std::unique_ptr<Agent>(
      new Agent(options, NewPosixProcessControl(), efd, sfd, wfd, pfd));
}

Agent::Agent(AgentOptions options, std::unique_ptr<ProcessControl> processes,
             int epoll_fd, int signal_fd, int wake_fd, int progress_fd)
    : options_(options),
      processes_(std::move(processes)),
      epoll_fd_(epoll_fd),
      signal_fd_(signal_fd),
      wake_fd_(wake_fd),
      progress_fd_(progress_fd) {}

void Agent::ReadProgress() {
  char buf[kMaxProgressBytes + 1];
  for (;;) {
    sockaddr_un from{};
    socklen_t from_len = sizeof from;
    ssize_t n = recvfrom(progress_fd_, buf, sizeof buf, MSG_DONTWAIT,
                         reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    const absl::string_view datagram(buf, static_cast<size_t>(n));
    // Malformed datagrams are dropped: the socket is owner-only, and a bad
    // one must never disturb the workers.
    if (IsBarrierDatagram(datagram)) {
      auto arrival = DecodeBarrier(datagram);
      if (!arrival.ok() || from_len <= sizeof(sa_family_t)) continue;  // nowhere to answer
      auto reply = [fd = progress_fd_, from, from_len](const absl::Status& st) {
        const std::string answer =
            st.ok() ? "ok" : absl::StrCat("error ", st.message()).substr(0, 1000);
        (void)sendto(fd, answer.data(), answer.size(), MSG_DONTWAIT,
                     reinterpret_cast<const sockaddr*>(&from), from_len);
      };
      if (options_.on_barrier) {
        options_.on_barrier(*arrival, reply);
      } else {
        reply(absl::UnimplementedError("this launcher relays no barriers"));
      }
      continue;
    }
    auto report = DecodeProgress(datagram);
    if (report.ok() && options_.on_progress) options_.on_progress(*report);
  }
}

Agent::~Agent() {
  DiscardStandbySet();
  if (progress_fd_ >= 0) {
    close(progress_fd_);
    unlink(options_.progress_socket.c_str());
  }
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

void Agent::ReapChildren(Supervisor* supervisor) {
  // Collect every exit first: when one worker dies its peers often fail a
  // moment later (a closed connection), and one SIGCHLD may cover both. The
  // order of waitpid says nothing about who died first, so within a batch a
  // death by signal is taken as the cause before an exit code, and an exit
  // code before a clean exit.
  std::vector<std::pair<pid_t, int>> batch;
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;  // 0: none ready; -1 (ECHILD): no children left
    batch.emplace_back(pid, status);
  }
  auto severity = [](int status) {
    if (WIFSIGNALED(status)) return 0;
    return WEXITSTATUS(status) != 0 ? 1 : 2;
  };
  std::stable_sort(batch.begin(), batch.end(), [&](const auto& a, const auto& b) {
    return severity(a.second) < severity(b.second);
  });
  const absl::Time now = absl::Now();
  for (const auto& [pid, status] : batch) {
    bool was_standby = false;
    for (Standby& s : standby_) was_standby = was_standby || s.pid == pid;
    if (was_standby) {
      // A standby that dies before it is needed makes its set useless; the
      // next attempt starts fresh processes.
      for (Standby& s : standby_) {
        if (s.pid == pid) s.pid = -1;
      }
      DiscardStandbySet();
    } else if (supervisor != nullptr) {
      supervisor->OnExit(pid, status, now);
    }
  }
}

void Agent::SpawnStandbySet(const AttemptSpec& spec, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    int fds[2];
    if (!StandbySocket(fds)) break;
    ProcessSpec p;
    p.argv = spec.standby_argv;
    p.env = spec.standby_env;
    p.env.push_back(absl::StrCat(env::kStandbyFd, "=", fds[1]));
    p.pass_fds = {{fds[1], fds[1]}};
    p.process_group = standby_pgid_;
    p.niceness = StandbyNiceness();
    auto spawned = processes_->Spawn(p);
    close(fds[1]);
    if (!spawned.ok()) {
      close(fds[0]);
      break;
    }
    if (standby_pgid_ == 0) standby_pgid_ = spawned->pid;
    standby_.push_back({spawned->pid, fds[0], spawned->stdout_fd, spawned->stderr_fd});
  }
  if (standby_.size() != n) {
    DiscardStandbySet();
    return;
  }
  standby_argv_ = spec.standby_argv;
  standby_env_ = spec.standby_env;
}

void Agent::DiscardStandbySet() {
  for (Standby& s : standby_) {
    for (int fd : {s.control, s.stdout_fd, s.stderr_fd}) {
      if (fd >= 0) close(fd);
    }
  }
  // Closing the sockets tells them to exit; SIGKILL makes sure. They are
  // reaped as strays by the next ReapChildren (or by the destructor's wait).
  if (standby_pgid_ != 0) (void)processes_->SignalGroup(standby_pgid_, SIGKILL);
  for (Standby& s : standby_) {
    if (s.pid > 0) {
      int status;
      while (waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
  standby_.clear();
  standby_pgid_ = 0;
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

  // Workers come from the standby set when it fits, else as new processes.
  const size_t n = spec.workers.size();
  std::vector<std::pair<int, int>> ranks;  // (local rank, rank) per worker
  for (const WorkerSpec& w : spec.workers) ranks.emplace_back(w.local_rank, w.rank);
  std::vector<int> controls(n, -1);  // our ends of the workers' standby sockets
  std::vector<bool> started(n, false);
  // Activations held back until the store listens (AttemptSpec::store_port).
  std::vector<std::string> held(n);
  size_t rank0 = n;  // the worker with rank 0, if it runs here
  for (size_t i = 0; i < n; ++i) {
    if (ranks[i].second == 0) rank0 = i;
  }
  const bool gate = spec.store_port > 0 && rank0 < n && n > 1;
  auto activate = [&](size_t i, std::string activation) {
    if (gate && ranks[i].second != 0) {
      held[i] = std::move(activation);
    } else {
      WriteAll(controls[i], activation);
    }
  };
  ReapChildren(nullptr);  // a standby may have died since the last attempt
  absl::StatusOr<std::vector<SpawnedProcess>> spawned;
  if (options_.standby && standby_.size() == n && standby_argv_ == spec.standby_argv &&
      standby_env_ == spec.standby_env) {
    std::vector<pid_t> pids;
    std::vector<SpawnedProcess> procs;
    for (size_t i = 0; i < n; ++i) {
      Standby& s = standby_[i];
      std::vector<std::string> activation;
      for (const std::string& e : spec.workers[i].process.env) {
        if (e.rfind(absl::StrCat(env::kStandbyFd, "="), 0) != 0) activation.push_back(e);
      }
      controls[i] = s.control;
      activate(i, EncodeActivation(activation));
      setpriority(PRIO_PROCESS, static_cast<id_t>(s.pid), 0);  // best effort
      pids.push_back(s.pid);
      procs.push_back({s.pid, s.stdout_fd, s.stderr_fd});
      started[i] = true;
    }
    supervisor.Adopt(std::move(spec.workers), pids, standby_pgid_);
    standby_.clear();
    standby_pgid_ = 0;
    spawned = std::move(procs);
    outcome.from_standby = true;
  } else {
    DiscardStandbySet();
    std::vector<int> theirs(n, -1);
    if (options_.standby) {
      for (size_t i = 0; i < n; ++i) {
        int fds[2];
        if (!StandbySocket(fds)) break;
        controls[i] = fds[0];
        theirs[i] = fds[1];
        ProcessSpec& p = spec.workers[i].process;
        p.env.push_back(absl::StrCat(env::kStandbyFd, "=", fds[1]));
        p.pass_fds.push_back({fds[1], fds[1]});
      }
    }
    spawned = supervisor.Start(std::move(spec.workers), absl::Now());
    for (size_t i = 0; i < n; ++i) {
      if (theirs[i] >= 0) close(theirs[i]);
      // Started directly, with the environment: an empty activation.
      if (controls[i] >= 0) activate(i, EncodeActivation({}));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (controls[i] < 0) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kControlBit | i;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, controls[i], &ev);
  }
  auto close_control = [&](size_t i) {
    if (controls[i] < 0) return;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, controls[i], nullptr);
    close(controls[i]);
    controls[i] = -1;
  };
  // The next attempt's standbys start once every worker of this one has
  // finished its own start-up, so they do not slow it down.
  auto maybe_start_standbys = [&] {
    if (!options_.standby || !spec.next_attempt_possible || !standby_.empty() ||
        supervisor.state() != Supervisor::State::kRunning) {
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      if (!started[i]) return;
    }
    SpawnStandbySet(spec, n);
  };

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
        std::function<void(absl::string_view)> sink;
        const std::function<void(const OutputLine&)>& on_line =
            spec.on_output_line ? spec.on_output_line : options_.on_output_line;
        if (on_line) {
          sink = [&on_line, local = ranks[i].first, rank = ranks[i].second,
                  is_stderr = k == 1](absl::string_view text) {
            on_line(OutputLine{local, rank, is_stderr, text});
          };
        }
        s.out = std::make_unique<OutputStream>(
            log_fds[2 * i + k], show[k] ? console[k] : -1, o.prefix, std::move(sink));
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
  maybe_start_standbys();  // activated standbys started long ago

  // The held activations go out once the store listens. Nothing signals
  // that, so once rank 0 runs (it has reported its start-up: it is past its
  // imports) the port is looked at every 2 ms, for at most kStoreGateMax.
  // A program that never reports its start-up never reads an activation
  // either: nothing is looked for then.
  bool holding = false;
  for (const std::string& h : held) holding = holding || !h.empty();
  absl::Time hold_until = absl::InfiniteFuture();
  auto polling = [&] { return holding && started[rank0]; };  // holding: rank0 < n
  auto release_held = [&] {
    if (!polling()) return;
    const absl::Time now = absl::Now();
    if (hold_until == absl::InfiniteFuture()) hold_until = now + kStoreGateMax;
    if (now < hold_until && !IsListening(spec.store_port)) return;
    for (size_t i = 0; i < n; ++i) {
      if (!held[i].empty() && controls[i] >= 0) WriteAll(controls[i], held[i]);
      held[i].clear();
    }
    holding = false;
  };

  epoll_event events[32];
  while (supervisor.state() != Supervisor::State::kDone) {
    release_held();
    int timeout_ms = -1;
    if (auto deadline = supervisor.NextDeadline()) {
      timeout_ms = static_cast<int>(
          absl::ToInt64Milliseconds(absl::Ceil(*deadline - absl::Now(), absl::Milliseconds(1))));
      if (timeout_ms < 0) timeout_ms = 0;
    }
    if (polling() && (timeout_ms < 0 || timeout_ms > 2)) timeout_ms = 2;
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
        if (child) ReapChildren(&supervisor);
      } else if (tag == kWakeTag) {
        uint64_t v;
        while (read(wake_fd_, &v, sizeof v) > 0) {
        }
        if (int sig = requested_stop_.load(); sig != 0) supervisor.Stop(sig, absl::Now());
      } else if (tag == kProgressTag) {
        ReadProgress();
      } else if (tag & kControlBit) {
        const size_t i = tag & ~kControlBit;
        char c[16];
        ssize_t got = read(controls[i], c, sizeof c);
        if (got > 0) {
          started[i] = started[i] || memchr(c, kStandbyReady, static_cast<size_t>(got));
        } else if (got == 0 || errno != EAGAIN) {
          close_control(i);  // activated (the worker closed it) or exited
        }
        maybe_start_standbys();
      } else if (tag < streams.size()) {
        drain(streams[tag], /*final=*/false);
      }
    }
    supervisor.OnTick(absl::Now());
  }
  for (size_t i = 0; i < n; ++i) close_control(i);
  for (Stream& s : streams) drain(s, /*final=*/true);
  streams.clear();
  // Reports sent just before the workers exited are delivered too.
  if (progress_fd_ >= 0) ReadProgress();
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
