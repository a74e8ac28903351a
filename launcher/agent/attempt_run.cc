#include "launcher/agent/attempt_run.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/progress.h"
#include "common/standby.h"
#include "common/worker_env.h"
#include "launcher/agent/cgroup.h"
#include "launcher/agent/outcome.h"

namespace elastrun::launcher {
namespace {

void Warn(absl::string_view what) {
  WriteAll(STDERR_FILENO, absl::StrCat("elastrun: warning: ", what, "\n"));
}

// Opens a worker's log file; a link there is never followed. `fresh`: the
// file must not exist (see AttemptSpec::new_log_files). -1 when `path` is
// empty.
absl::StatusOr<int> OpenLog(const std::string& path, bool fresh) {
  if (path.empty()) return -1;
  if (fresh) return CreateNewFile(path, 0640);
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write log file ", path, ": ", std::strerror(errno)));
  }
  return fd;
}

size_t RankZeroOf(const AttemptSpec& spec) {
  for (size_t i = 0; i < spec.workers.size(); ++i) {
    if (spec.workers[i].rank == 0) return i;
  }
  return spec.workers.size();
}

// The gate holds something only where rank 0, and so the store, runs here
// next to other workers.
bool GateCloses(const AttemptSpec& spec) {
  return spec.store_port > 0 && RankZeroOf(spec) < spec.workers.size() &&
         spec.workers.size() > 1;
}

std::vector<int> RanksOf(const AttemptSpec& spec) {
  std::vector<int> ranks;
  for (const WorkerSpec& w : spec.workers) ranks.push_back(w.rank);
  return ranks;
}

// How long a hung worker that catches SIGUSR1 (Python's faulthandler) gets
// to write its stacks, and how long eu-stack may take at most.
constexpr absl::Duration kOwnDumpWait = absl::Seconds(2);
constexpr absl::Duration kStackToolWait = absl::Seconds(20);

HangPolicy HangPolicyOf(const AttemptSpec& spec) {
  HangPolicy policy;
  policy.timeout = spec.hang_timeout;
  policy.other_nodes = spec.other_nodes;
  return policy;
}

}  // namespace

AttemptRun::AttemptRun(AttemptEnv env, AttemptSpec spec)
    : env_(std::move(env)),
      spec_(std::move(spec)),
      n_(spec_.workers.size()),
      rank0_(RankZeroOf(spec_)),
      supervisor_(env_.processes, Supervisor::Options{env_.grace}),
      processes_(env_.processes, env_.poller),
      pump_(env_.poller),
      gate_(GateCloses(spec_), spec_.store_port, env_.is_listening),
      liveness_(HangPolicyOf(spec_), RanksOf(spec_), env_.clock->Now()) {
  for (const WorkerSpec& w : spec_.workers) {
    ranks_.emplace_back(w.local_rank, w.rank);
    run_as_.push_back(w.process.run_as);
  }
  if (!spec_.on_output_line) spec_.on_output_line = env_.on_output_line;
}

AttemptRun::~AttemptRun() {
  if (cgroup_procs_fd_ >= 0) close(cgroup_procs_fd_);
  for (size_t i = 0; i < controls_.size(); ++i) CloseControl(i);
  for (int fd : log_fds_) {
    if (fd >= 0) close(fd);
  }
  for (int fd : stderr_logs_) {
    if (fd >= 0) close(fd);
  }
}

absl::Status AttemptRun::OpenLogs() {
  for (const WorkerOutput& o : spec_.outputs) {
    for (const std::string* path : {&o.stdout_log, &o.stderr_log}) {
      absl::StatusOr<int> fd = OpenLog(*path, spec_.new_log_files);
      if (!fd.ok()) return fd.status();
      log_fds_.push_back(*fd);
    }
  }
  return absl::OkStatus();
}

absl::Status AttemptRun::Begin() {
  if (spec_.outputs.size() != n_) {
    return absl::InvalidArgumentError("one WorkerOutput per worker is required");
  }
  // Before starting anything, so a bad --log-dir is an error before any
  // worker runs.
  if (absl::Status s = OpenLogs(); !s.ok()) return s;
  MakeCgroupOrWarn();
  controls_.assign(n_, -1);
  started_.assign(n_, false);
  samples_.assign(n_, ProcSample{});
  // A fresh secret per worker and attempt, in the environment a new worker
  // starts with and in a standby's activation (never in its pre-start
  // environment: a standby is no worker until activated).
  for (size_t i = 0; i < n_; ++i) {
    secrets_.push_back(NewAgentSecret());
    spec_.workers[i].process.env.push_back(
        absl::StrCat(env::kAgentSecret, "=", secrets_[i]));
    stderr_logs_.push_back(
        log_fds_[2 * i + 1] >= 0 ? fcntl(log_fds_[2 * i + 1], F_DUPFD_CLOEXEC, 3) : -1);
  }
  next_sample_ = env_.clock->Now();
  std::optional<StandbySet> set;
  if (env_.standbys != nullptr && !spec_.standby_argv.empty()) {
    set = env_.standbys->Take(spec_.standby_argv, spec_.standby_env, n_,
                              spec_.standby_cwd, spec_.standby_run_as);
    if (!set) env_.standbys->Discard();  // of another program, or broken
  }
  std::vector<SpawnedProcess> procs;
  if (set) {
    AdoptStandbys(*std::move(set), procs);
  } else {
    auto spawned = SpawnWorkers();
    if (spawned.ok()) procs = *std::move(spawned);
    spawn_error_ = spawned.status();
  }
  if (cgroup_procs_fd_ >= 0) close(cgroup_procs_fd_);
  cgroup_procs_fd_ = -1;
  const pid_t pgid = supervisor_.process_group();
  processes_.AddGroup(pgid);
  for (const SpawnedProcess& p : procs) {
    // Without a pidfd the worker is still reaped with its group on SIGCHLD.
    (void)processes_.Add(p.pid, pgid);
  }
  for (size_t i = 0; i < n_; ++i) {
    if (controls_[i] < 0) continue;
    (void)env_.poller->Watch(controls_[i], [this, i] { OnControl(i); });
  }
  if (spawn_error_.ok()) {
    PumpOutput(procs);
  } else {
    for (int& fd : log_fds_) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
  MaybeFillStandbys();  // activated standbys started long ago
  return absl::OkStatus();
}

void AttemptRun::MakeCgroupOrWarn() {
  if (env_.cgroup.empty()) return;
  absl::Status made = MakeCgroup(env_.cgroup);
  absl::StatusOr<int> fd = made.ok() ? OpenCgroupProcs(env_.cgroup) : made;
  if (!fd.ok()) {
    Warn(absl::StrCat("the attempt's workers run without a cgroup of their own: ",
                      fd.status().message()));
    return;
  }
  in_cgroup_ = true;
  cgroup_procs_fd_ = *fd;
}

void AttemptRun::AdoptStandbys(StandbySet set, std::vector<SpawnedProcess>& procs) {
  // The standbys (and whatever they started) become the attempt's: they
  // leave their set's cgroup for the attempt's.
  if (!set.cgroup.empty()) {
    absl::Status moved =
        in_cgroup_ ? MoveCgroupProcesses(set.cgroup, env_.cgroup) : absl::OkStatus();
    // Removes the emptied folder (or, without the attempt's own, keeps it
    // with the attempt: killed at its end like the attempt's).
    if (moved.ok() && in_cgroup_) {
      (void)KillCgroup(set.cgroup);
    } else {
      if (!moved.ok()) Warn(moved.message());
      adopted_cgroup_ = set.cgroup;
    }
  }
  const std::string standby_fd = absl::StrCat(env::kStandbyFd, "=");
  std::vector<pid_t> pids;
  for (size_t i = 0; i < n_; ++i) {
    const StandbyWorker& s = set.workers[i];
    std::vector<std::string> activation;
    for (const std::string& e : spec_.workers[i].process.env) {
      if (e.rfind(standby_fd, 0) != 0) activation.push_back(e);
    }
    controls_[i] = s.control;
    setpriority(PRIO_PROCESS, static_cast<id_t>(s.pid), 0);  // best effort
    pids.push_back(s.pid);
    procs.push_back({s.pid, s.stdout_fd, s.stderr_fd});
    Activate(i, EncodeActivation(activation));
  }
  supervisor_.Adopt(std::move(spec_.workers), pids, set.pgid);
  for (size_t i = 0; i < n_; ++i) MarkStarted(i);
  from_standby_ = true;
}

absl::StatusOr<std::vector<SpawnedProcess>> AttemptRun::SpawnWorkers() {
  // Under --standby every worker gets a standby socket and an empty
  // activation, so it reports the end of its start-up like a standby does.
  std::vector<int> theirs(n_, -1);
  for (size_t i = 0; env_.standbys != nullptr && i < n_; ++i) {
    int fds[2];
    if (!StandbySocket(fds)) break;
    controls_[i] = fds[0];
    theirs[i] = fds[1];
    ProcessSpec& p = spec_.workers[i].process;
    p.env.push_back(absl::StrCat(env::kStandbyFd, "=", fds[1]));
    p.pass_fds.push_back({fds[1], fds[1]});
  }
  for (WorkerSpec& w : spec_.workers) w.process.cgroup_procs_fd = cgroup_procs_fd_;
  auto spawned = supervisor_.Start(std::move(spec_.workers), env_.clock->Now());
  for (size_t i = 0; i < n_; ++i) {
    if (theirs[i] >= 0) close(theirs[i]);
    if (controls_[i] >= 0) Activate(i, EncodeActivation({}));
  }
  return spawned;
}

void AttemptRun::PumpOutput(const std::vector<SpawnedProcess>& procs) {
  const int console[2] = {env_.console_stdout_fd, env_.console_stderr_fd};
  for (size_t i = 0; i < procs.size(); ++i) {
    const WorkerOutput& o = spec_.outputs[i];
    const int fds[2] = {procs[i].stdout_fd, procs[i].stderr_fd};
    const bool show[2] = {o.stdout_to_console, o.stderr_to_console};
    for (int k = 0; k < 2; ++k) {
      std::function<void(absl::string_view)> sink;
      if (spec_.on_output_line) {
        sink = [this, local = ranks_[i].first, rank = ranks_[i].second,
                is_stderr = k == 1](absl::string_view text) {
          spec_.on_output_line(OutputLine{local, rank, is_stderr, text});
        };
      }
      pump_.Add(fds[k], std::make_unique<OutputStream>(log_fds_[2 * i + k],
                                                       show[k] ? console[k] : -1, o.prefix,
                                                       std::move(sink)));
      log_fds_[2 * i + k] = -1;  // owned by the stream now
    }
  }
}

void AttemptRun::Activate(size_t i, std::string activation) {
  if (gate_.Holds(ranks_[i].second)) {
    gate_.Hold(i, std::move(activation));
  } else {
    WriteAll(controls_[i], activation);
  }
}

void AttemptRun::MarkStarted(size_t i) {
  if (started_[i]) return;
  started_[i] = true;
  if (i == rank0_) gate_.RankZeroStarted(env_.clock->Now());
}

void AttemptRun::OnControl(size_t i) {
  char c[16];
  ssize_t got = read(controls_[i], c, sizeof c);
  if (got > 0) {
    if (memchr(c, kStandbyReady, static_cast<size_t>(got)) != nullptr) MarkStarted(i);
  } else if (got == 0 || errno != EAGAIN) {
    CloseControl(i);  // activated (the worker closed it) or exited
  }
  MaybeFillStandbys();
}

void AttemptRun::CloseControl(size_t i) {
  if (controls_[i] < 0) return;
  env_.poller->Unwatch(controls_[i]);
  close(controls_[i]);
  controls_[i] = -1;
}

void AttemptRun::MaybeFillStandbys() {
  // Only once every worker of this attempt finished its own start-up, so
  // the standbys do not slow it down.
  if (env_.standbys == nullptr || spec_.standby_argv.empty() || !spec_.next_attempt_possible ||
      !env_.standbys->empty() || supervisor_.state() != Supervisor::State::kRunning) {
    return;
  }
  for (size_t i = 0; i < n_; ++i) {
    if (!started_[i]) return;
  }
  env_.standbys->Fill(spec_.standby_argv, spec_.standby_env, n_, spec_.standby_cwd,
                      spec_.standby_run_as);
}

std::optional<size_t> AttemptRun::WorkerWithSecret(absl::string_view secret) const {
  if (done() || secret.empty()) return std::nullopt;
  for (size_t i = 0; i < secrets_.size(); ++i) {
    // Compared in constant time: the time taken tells nothing of the secret.
    if (secrets_[i].size() != secret.size()) continue;
    unsigned char diff = 0;
    for (size_t k = 0; k < secret.size(); ++k) diff |= secrets_[i][k] ^ secret[k];
    if (diff == 0) return i;
  }
  return std::nullopt;
}

void AttemptRun::OnProgress(size_t i, const ProgressReport& report) {
  const absl::Time now = env_.clock->Now();
  if (report.step >= 0) liveness_.OnReport(i, report.step, now);
  if (report.beat > 0) liveness_.OnBeat(i, report.beat, now);
}

std::unique_ptr<OutputStream> AttemptRun::StderrStream(size_t i) {
  const int log = stderr_logs_[i] >= 0 ? fcntl(stderr_logs_[i], F_DUPFD_CLOEXEC, 3) : -1;
  const WorkerOutput& o = spec_.outputs[i];
  std::function<void(absl::string_view)> sink;
  if (spec_.on_output_line) {
    sink = [this, local = ranks_[i].first,
            rank = ranks_[i].second](absl::string_view text) {
      spec_.on_output_line(OutputLine{local, rank, /*is_stderr=*/true, text});
    };
  }
  return std::make_unique<OutputStream>(
      log, o.stderr_to_console ? env_.console_stderr_fd : -1, o.prefix, std::move(sink));
}

void AttemptRun::WatchLiveness(absl::Time now) {
  if (!liveness_.enabled() || supervisor_.state() != Supervisor::State::kRunning) return;
  if (dump_) return MaybeEndDump(now);
  if (now < next_sample_) return;
  next_sample_ = now + liveness_.SampleInterval();
  ProcReader& reader = env_.proc_reader != nullptr ? *env_.proc_reader : RealProcReader();
  for (size_t i = 0; i < n_; ++i) {
    const pid_t pid = supervisor_.pid(i);
    samples_[i] = pid > 0 ? reader.Read(pid) : ProcSample{};
    liveness_.OnSample(i, samples_[i], now);
  }
  if (std::optional<Hang> hang = liveness_.Check(now)) BeginDump(*hang, now);
}

void AttemptRun::BeginDump(const Hang& hang, absl::Time now) {
  dump_ = Dump{hang, now, -1, now, now};
  const size_t i = hang.worker;
  const pid_t pid = supervisor_.pid(i);
  // The root cause from now on, even if the worker, let go on by SIGCONT,
  // then exits 0 before the group is stopped.
  supervisor_.DeclareHung(i, hang.step, hang.idle, now);
  StderrStream(i)->Write(
      absl::StrCat("elastrun: ", DescribeHang(hang.rank, hang.step, hang.idle),
                   "; its stacks follow, then the group is stopped\n"));
  // A stopped process writes no stacks (and a stopped tracee confuses
  // eu-stack): let it run again for the dump.
  if (hang.stopped) (void)env_.processes->SignalProcess(pid, SIGCONT);
  if (samples_[i].catches_sigusr1) {
    (void)env_.processes->SignalProcess(pid, SIGUSR1);
    dump_->wait_until = now + kOwnDumpWait;
  }
  dump_->deadline = dump_->wait_until;
  if (env_.stack_tool.empty()) return;
  ProcessSpec tool;
  tool.argv = {env_.stack_tool, "-p", absl::StrCat(pid)};
  tool.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  // As the worker's user: the tool parses the worker's ELF and DWARF, which
  // that user controls; root never does.
  tool.run_as = run_as_[i];
  // In the attempt's group: reaped with it, and stopped with it at the end.
  tool.process_group = supervisor_.process_group();
  auto spawned = env_.processes->Spawn(tool);
  if (!spawned.ok()) {
    StderrStream(i)->Write(
        absl::StrCat("elastrun: no native stacks: ", spawned.status().message(), "\n"));
    return;
  }
  dump_->tool_pid = spawned->pid;
  dump_->deadline = now + kStackToolWait;
  (void)processes_.Add(spawned->pid, supervisor_.process_group());
  pump_.Add(spawned->stdout_fd, StderrStream(i));
  pump_.Add(spawned->stderr_fd, StderrStream(i));
}

void AttemptRun::MaybeEndDump(absl::Time now) {
  const bool tool_done = dump_->tool_pid < 0;
  if (now < dump_->deadline && !(tool_done && now >= dump_->wait_until)) return;
  supervisor_.Stop(SIGTERM, now);
}

void AttemptRun::Stop(int sig) { supervisor_.Stop(sig, env_.clock->Now()); }

void AttemptRun::OnChildSignal() { processes_.ReapGroups(); }

void AttemptRun::OnTick() {
  const absl::Time now = env_.clock->Now();
  for (const auto& [pid, status] : processes_.TakeExits()) {
    if (dump_ && pid == dump_->tool_pid) dump_->tool_pid = -1;
    supervisor_.OnExit(pid, status, now);
  }
  for (const auto& [i, activation] : gate_.Poll(now)) {
    if (controls_[i] >= 0) WriteAll(controls_[i], activation);
  }
  WatchLiveness(now);
  supervisor_.OnTick(now);
}

std::optional<absl::Time> AttemptRun::NextDeadline() const {
  std::optional<absl::Time> next = supervisor_.NextDeadline();
  if (liveness_.enabled() && supervisor_.state() == Supervisor::State::kRunning) {
    // While eu-stack runs its exit is an event; only its deadline is a time.
    const absl::Time due = !dump_ ? next_sample_
                           : dump_->tool_pid >= 0
                               ? dump_->deadline
                               : std::min(dump_->deadline, dump_->wait_until);
    if (!next || due < *next) next = due;
  }
  if (auto poll = gate_.NextPoll(env_.clock->Now()); poll && (!next || *poll < *next)) {
    next = poll;
  }
  return next;
}

AttemptOutcome AttemptRun::Finish() {
  // Before the output is drained: a process left in the cgroup may hold a
  // worker's pipe open.
  for (const std::string& dir : {in_cgroup_ ? env_.cgroup : "", adopted_cgroup_}) {
    if (dir.empty()) continue;
    if (absl::StatusOr<int> killed = KillCgroup(dir); !killed.ok()) {
      Warn(killed.status().message());
    }
  }
  for (size_t i = 0; i < controls_.size(); ++i) CloseControl(i);
  pump_.Finish();
  AttemptOutcome outcome = ClassifyOutcome(supervisor_, spawn_error_);
  outcome.from_standby = from_standby_;
  return outcome;
}

}  // namespace elastrun::launcher
