#include "launcher/daemon/daemon.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "common/files.h"
#include "launcher/agent/attempt.h"
#include "launcher/round/context.h"
#include "launcher/agent/port.h"
#include "launcher/round/failure.h"
#include "rendezvous/codec.h"

namespace elastrun::launcher {
namespace {

// How many recent MASTER_PORTs to keep clear of.
constexpr size_t kRecentPorts = 32;
// Exit code reported when a worker cannot be started at all (as a shell).
constexpr int kCannotStart = 127;
// JoinRound tries, and the delay before the n-th retry (times n).
constexpr int kJoinAttempts = 3;
constexpr absl::Duration kJoinRetryDelay = absl::Milliseconds(100);

// Whether a report may succeed later: the service is away or slow.
bool Retriable(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) ||
         absl::IsCancelled(st) || absl::IsUnknown(st);
}

v1::ReportExitRequest FailureReport(const std::string& node, const std::string& job,
                                    int64_t round, const rendezvous::Failure& f) {
  v1::ReportExitRequest r;
  r.set_job_id(job);
  r.set_round(round);
  r.set_node_id(node);
  *r.mutable_failure() = rendezvous::ToProto(f);
  return r;
}

}  // namespace

Daemon::Daemon(DaemonOptions options, RendezvousClient* client, AttemptRunner* runner)
    : options_(std::move(options)), client_(client), runner_(runner) {}

void Daemon::OnCommand(const v1::Command& command) {
  switch (command.kind_case()) {
    case v1::Command::kJoinRound:
      HandleJoin(command.join_round());
      break;
    case v1::Command::kStart:
      HandleStart(command.start());
      break;
    case v1::Command::kStop:
      HandleStop(command.stop().job_id(), command.stop().round());
      break;
    case v1::Command::kEndJob: {
      LOG(INFO) << "job " << command.end_job().job_id() << " ended here: "
                << command.end_job().reason();
      {
        absl::MutexLock lock(&mu_);
        // Reports for a job this node left would only be refused. The job
        // is not blacklisted: the service may place this node on it again
        // (after a network blip made it lose the node), with a new round.
        for (auto it = reports_.begin(); it != reports_.end();) {
          it = it->job_id() == command.end_job().job_id() ? reports_.erase(it) : it + 1;
        }
      }
      HandleStop(command.end_job().job_id(), std::nullopt);
      break;
    }
    case v1::Command::kWelcome:
    case v1::Command::KIND_NOT_SET:
      break;
  }
}

void Daemon::HandleJoin(const v1::JoinRoundCommand& join) {
  int port = 0;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    if (current_ && current_->job_id != join.job_id() && !current_->stop_requested) {
      // Placement never does this (a busy node is full); joining anyway
      // would leave a round waiting for an attempt that cannot start here.
      LOG(ERROR) << "asked to join job " << join.job_id() << " while job "
                 << current_->job_id << " runs; not joining";
      return;
    }
    std::set<int> avoid(recent_ports_.begin(), recent_ports_.end());
    absl::StatusOr<int> picked = PickFreePort(avoid);
    if (!picked.ok()) {
      LOG(ERROR) << "job " << join.job_id() << " round " << join.round()
                 << ": no free port for MASTER_PORT: " << picked.status();
      return;
    }
    port = *picked;
    recent_ports_.push_back(port);
    if (recent_ports_.size() > kRecentPorts) recent_ports_.pop_front();
  }
  // An older attempt of this job that still runs is stale now.
  HandleStop(join.job_id(), join.round() - 1);

  v1::JoinRoundRequest r;
  r.set_job_id(join.job_id());
  r.set_round(join.round());
  r.set_node_id(options_.node_id);
  r.set_master_port(port);
  r.set_local_world_size(join.spec().nproc_per_node());
  // A short retry for a slow or briefly unreachable service; when the
  // stream itself broke, the re-attached stream re-sends the command.
  absl::StatusOr<v1::JoinRoundResponse> resp = client_->JoinRound(r);
  for (int attempt = 1; attempt < kJoinAttempts && !resp.ok() && Retriable(resp.status());
       ++attempt) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&shutting_down_),
                               kJoinRetryDelay * attempt)) {
        return;
      }
    }
    resp = client_->JoinRound(r);
  }
  if (!resp.ok()) {
    LOG(WARNING) << "JoinRound job " << join.job_id() << " round " << join.round() << ": "
                 << resp.status();
    return;
  }
  LOG(INFO) << "joined job " << join.job_id() << " round " << resp->round()
            << (resp->spare() ? " as a spare" : "") << " (port " << port << ")";
}

void Daemon::HandleStart(const v1::StartAttempt& start) {
  const int64_t round = start.assignment().round();
  std::optional<Launched> launch;
  uint64_t stop_id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    if (ran_.count({start.job_id(), round})) return;  // already ran: never twice
    if (current_ && current_->job_id == start.job_id() && current_->round == round) {
      return;  // the attempt already running: a no-op
    }
    if (next_ && next_->job_id() == start.job_id() &&
        next_->assignment().round() == round) {
      return;
    }
    if (current_) {
      // Still stopping (or stale): this one starts when it has ended.
      next_ = start;
      if (!current_->stop_requested) {
        LOG(WARNING) << "attempt " << current_->job_id << "/" << current_->round
                     << " still runs; stopping it for " << start.job_id() << "/" << round;
        current_->stop_requested = true;
        stop_id = current_->id;
      }
    } else {
      launch = Launch(start);
    }
  }
  if (stop_id != 0) runner_->Stop(stop_id, SIGTERM);
  StartOnRunner(std::move(launch));
}

std::optional<Daemon::Launched> Daemon::Launch(const v1::StartAttempt& start) {
  const v1::Assignment& a = start.assignment();
  const v1::NodeAssignment* me = nullptr;
  for (const v1::NodeAssignment& n : a.nodes()) {
    if (n.node_id() == options_.node_id) me = &n;
  }
  ran_.insert({start.job_id(), a.round()});
  const std::string attempt_dir =
      absl::StrCat(options_.log_dir, "/", start.job_id(), "/attempt_", a.round());
  if (me == nullptr) {
    LOG(ERROR) << "StartAttempt for job " << start.job_id() << " round " << a.round()
               << " does not name this node; ignored";
    return std::nullopt;
  }
  GroupSpec group;
  group.argv.assign(start.spec().argv().begin(), start.spec().argv().end());
  group.nproc_per_node = me->local_world_size();
  group.max_restarts = start.max_restarts();
  group.agent_socket = options_.agent_socket;
  const rendezvous::RoundAssignment round = rendezvous::FromProto(a);
  const AttemptContext ctx =
      ContextFor(start.job_id(), round, *round.Find(options_.node_id), attempt_dir);
  absl::Status made;
  for (int local = 0; local < group.nproc_per_node && made.ok(); ++local) {
    made = MakeDirs(absl::StrCat(attempt_dir, "/", local));
  }
  if (!made.ok()) {
    rendezvous::Failure f;
    f.node_id = options_.node_id;
    f.round = a.round();
    f.exit_code = kCannotStart;
    f.cannot_start = true;
    f.time = absl::Now();
    f.message = absl::StrCat("elastrund on ", options_.node_id, ": ", made.message());
    reports_.push_back(FailureReport(options_.node_id, start.job_id(), a.round(), f));
    return std::nullopt;
  }
  std::vector<std::string> env = options_.base_env;
  for (const auto& [name, value] : start.spec().env()) env.push_back(name + "=" + value);
  AttemptSpec spec = BuildAttempt(group, ctx, env);
  const std::string cwd =
      start.spec().working_dir().empty() ? options_.working_dir : start.spec().working_dir();
  for (WorkerSpec& w : spec.workers) w.process.cwd = cwd;

  Attempt attempt;
  attempt.id = next_id_++;
  attempt.job_id = start.job_id();
  attempt.round = a.round();
  attempt.attempt_dir = attempt_dir;
  current_ = attempt;
  LOG(INFO) << "starting job " << start.job_id() << " round " << a.round() << ": group rank "
            << me->group_rank() << " of " << a.group_world_size() << ", ranks "
            << me->rank_offset() << ".." << me->rank_offset() + me->local_world_size() - 1
            << " of " << a.world_size() << ", master " << a.master_addr() << ":"
            << a.master_port();
  return Launched{attempt.id, attempt.job_id, attempt.round, std::move(spec)};
}

void Daemon::StartOnRunner(std::optional<Launched> launch) {
  if (!launch) {
    FlushReports();  // a launch that failed queued its report
    return;
  }
  if (options_.on_attempt_start) options_.on_attempt_start(launch->job_id, launch->round);
  const uint64_t id = launch->id;
  runner_->Start(id, std::move(launch->spec),
                 [this, id](const AttemptOutcome& outcome) { OnAttemptEnded(id, outcome); });
}

void Daemon::HandleStop(const std::string& job_id, std::optional<int64_t> round) {
  uint64_t stop_id = 0;
  {
    absl::MutexLock lock(&mu_);
    // A stop for round g also covers older rounds: they are stale too.
    if (next_ && next_->job_id() == job_id &&
        (!round || next_->assignment().round() <= *round)) {
      next_.reset();
    }
    if (current_ && current_->job_id == job_id && (!round || current_->round <= *round) &&
        !current_->stop_requested) {
      current_->stop_requested = true;
      stop_id = current_->id;
      LOG(INFO) << "stopping job " << job_id << " round " << current_->round;
    }
  }
  if (stop_id != 0) runner_->Stop(stop_id, SIGTERM);
}

void Daemon::OnAttemptEnded(uint64_t id, const AttemptOutcome& outcome) {
  std::optional<Launched> launch;
  {
    absl::MutexLock lock(&mu_);
    if (!current_ || current_->id != id) {
      LOG(ERROR) << "end of unknown attempt " << id << " ignored";
      return;
    }
    const Attempt a = *current_;
    current_.reset();
    if (outcome.leftovers) {
      LOG(WARNING) << "job " << a.job_id << " round " << a.round
                   << ": some processes could not be reaped after SIGKILL";
    }
    using Kind = AttemptOutcome::Kind;
    // A worker that failed before any stop was asked is a root cause even
    // when a stop followed; exits caused by the stop are not failures.
    if (outcome.kind == Kind::kFailed && !outcome.spawn_error.ok()) {
      rendezvous::Failure f;
      f.node_id = options_.node_id;
      f.round = a.round;
      f.exit_code = kCannotStart;
      f.cannot_start = true;
      f.time = absl::Now();
      f.message = std::string(outcome.spawn_error.message());
      reports_.push_back(FailureReport(options_.node_id, a.job_id, a.round, f));
    } else if (outcome.kind == Kind::kFailed && outcome.first_failure) {
      const WorkerExit& e = *outcome.first_failure;
      LOG(INFO) << "job " << a.job_id << " round " << a.round << ": rank " << e.rank
                << " failed with " << DescribeExit(e);
      reports_.push_back(FailureReport(options_.node_id, a.job_id, a.round,
                                       MakeFailure(options_.node_id, a.round, e,
                                                   a.attempt_dir)));
    } else if (outcome.kind == Kind::kSucceeded && !a.stop_requested) {
      LOG(INFO) << "job " << a.job_id << " round " << a.round << ": every worker exited 0";
      v1::ReportExitRequest r;
      r.set_job_id(a.job_id);
      r.set_round(a.round);
      r.set_node_id(options_.node_id);
      r.set_succeeded(true);
      reports_.push_back(std::move(r));
    } else {
      LOG(INFO) << "job " << a.job_id << " round " << a.round << " stopped";
    }
    if (next_ && !shutting_down_) {
      v1::StartAttempt start = *std::move(next_);
      next_.reset();
      launch = Launch(start);
    }
  }
  if (launch) StartOnRunner(std::move(launch));
  FlushReports();
}

void Daemon::FlushReports() {
  {
    absl::MutexLock lock(&mu_);
    if (flushing_) return;  // the flushing thread sends what was added too
    flushing_ = true;
  }
  if (options_.before_reports) options_.before_reports();
  for (;;) {
    v1::ReportExitRequest r;
    {
      absl::MutexLock lock(&mu_);
      if (reports_.empty()) {
        flushing_ = false;
        return;
      }
      r = reports_.front();
    }
    absl::Status st = client_->ReportExit(r);
    absl::MutexLock lock(&mu_);
    if (!st.ok() && Retriable(st)) {
      LOG(WARNING) << "ReportExit job " << r.job_id() << " round " << r.round()
                   << " kept for later: " << st;
      flushing_ = false;
      return;
    }
    if (!st.ok()) {
      LOG(WARNING) << "ReportExit job " << r.job_id() << " round " << r.round()
                   << " refused: " << st;
    }
    // The front may have been dropped by an EndJob meanwhile.
    if (!reports_.empty() && reports_.front().job_id() == r.job_id() &&
        reports_.front().round() == r.round()) {
      reports_.pop_front();
    }
  }
}

std::vector<v1::RunningAttempt> Daemon::Running() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::RunningAttempt> out;
  if (current_ && !current_->stop_requested) {
    v1::RunningAttempt a;
    a.set_job_id(current_->job_id);
    a.set_round(current_->round);
    out.push_back(a);
  }
  return out;
}

void Daemon::Shutdown(int sig) {
  uint64_t stop_id = 0;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    next_.reset();
    if (current_ && !current_->stop_requested) {
      current_->stop_requested = true;
      stop_id = current_->id;
    }
  }
  if (stop_id != 0) runner_->Stop(stop_id, sig);
}

bool Daemon::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !current_.has_value() && !next_.has_value();
  };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

size_t Daemon::pending_reports() const {
  absl::MutexLock lock(&mu_);
  return reports_.size();
}

}  // namespace elastrun::launcher
