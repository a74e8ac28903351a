#include "launcher/daemon/daemon.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "launcher/agent/port.h"
#include "launcher/daemon/attempt_start.h"
#include "launcher/daemon/reports.h"
#include "launcher/protocol/failure.h"

namespace elastrun::launcher {
namespace {

using internal::FailureReport;
using internal::Retriable;

// How many recent MASTER_PORTs to keep clear of.
constexpr size_t kRecentPorts = 32;
// JoinRound tries, and the delay before the n-th retry (times n).
constexpr int kJoinAttempts = 3;
constexpr absl::Duration kJoinRetryDelay = absl::Milliseconds(100);

// The workers `start` runs on `node` (0: it does not name the node).
int LocalNproc(const v1::StartAttempt& start, const std::string& node) {
  for (const v1::NodeAssignment& n : start.assignment().nodes()) {
    if (n.node_id() == node) return n.local_world_size();
  }
  return 0;
}

}  // namespace

Daemon::Daemon(DaemonOptions options, RendezvousClient* client, AttemptRunner* runner)
    : options_(std::move(options)),
      client_(client),
      runner_(runner),
      node_{options_.node_id, options_.log_dir, options_.base_env, options_.working_dir,
            options_.agent_socket},
      snapshots_(options_.snapshot_base, options_.node_id),
      reports_(client, &lanes_, options_.before_reports) {}

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
        const std::string& job = command.end_job().job_id();
        // The job's reports not taken yet stay queued: the service may
        // have ended the job in memory only (its disk full, the end not
        // saved), and a restarted one learns from them that this node's
        // attempt ended (RunningAttempt.ended) rather than take it as
        // lost. A service that has the end stored answers OK; one that
        // left the round refuses the report for good: dropped either way.
        // The job is not blacklisted: the service may place this node on
        // it again (after a network blip made it lose the node).
        if (auto it = jobs_.find(job); it != jobs_.end()) it->second.joined_nproc = 0;
        ending_.insert(job);
        failed_at_.erase(job);  // no restart will follow here
      }
      HandleStop(command.end_job().job_id(), std::nullopt);
      {
        absl::MutexLock lock(&mu_);
        MaybeFinishEndingLocked(command.end_job().job_id());
      }
      CallJobsDone();
      break;
    }
    case v1::Command::kWelcome: {
      absl::MutexLock lock(&mu_);
      const std::string& cluster = command.welcome().cluster_id();
      if (!cluster_id_.empty() && cluster != cluster_id_) {
        LOG(WARNING) << "the rendezvous service is another cluster now (" << cluster_id_
                     << " before, " << (cluster.empty() ? "none" : cluster)
                     << " now): its job ids are new jobs here, whatever ran under them";
      }
      cluster_id_ = cluster;
      break;
    }
    case v1::Command::KIND_NOT_SET:
      break;
  }
}

void Daemon::HandleJoin(const v1::JoinRoundCommand& join) {
  const std::string& job = join.job_id();
  const int nproc = std::max(1, join.spec().nproc_per_node());
  int port = 0;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    const int others = SlotsOfOthersLocked(job, /*live_only=*/true);
    if (others + nproc > options_.slots) {
      // Placement never does this (the node is full); joining anyway would
      // leave a round waiting for an attempt that cannot start here.
      LOG(ERROR) << "asked to join job " << job << " round " << join.round() << " with "
                 << nproc << " workers, but " << others << " of this node's "
                 << options_.slots << " slots are taken by " << HoldersLocked(job)
                 << "; not joining";
      return;
    }
    std::set<int> avoid(recent_ports_.begin(), recent_ports_.end());
    absl::StatusOr<int> picked = PickFreePort(avoid);
    if (!picked.ok()) {
      LOG(ERROR) << "job " << job << " round " << join.round()
                 << ": no free port for MASTER_PORT: " << picked.status();
      return;
    }
    port = *picked;
    recent_ports_.push_back(port);
    if (recent_ports_.size() > kRecentPorts) recent_ports_.pop_front();
    JobHere& j = jobs_[job];
    j.joined_nproc = nproc;
    j.joined_round = join.round();
  }
  // An older attempt of this job that still runs is stale now.
  HandleStop(job, join.round() - 1);

  v1::JoinRoundRequest r;
  r.set_job_id(job);
  r.set_round(join.round());
  r.set_node_id(options_.node_id);
  r.set_master_port(port);
  r.set_local_world_size(join.spec().nproc_per_node());
  if (options_.group_rank >= 0) r.set_group_rank(options_.group_rank);
  lanes_.Post(job, [this, r] { CallJoinRound(r); });
}

void Daemon::CallJoinRound(const v1::JoinRoundRequest& r) {
  const std::string& job = r.job_id();
  {
    absl::MutexLock lock(&mu_);
    // Stopped meanwhile (EndJob, a newer round, Shutdown): nothing to join.
    auto it = jobs_.find(job);
    if (shutting_down_ || it == jobs_.end() || it->second.joined_round != r.round() ||
        it->second.joined_nproc == 0) {
      return;
    }
  }
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
    LOG(WARNING) << "JoinRound job " << job << " round " << r.round() << ": "
                 << resp.status();
    absl::MutexLock lock(&mu_);
    if (auto it = jobs_.find(job);
        it != jobs_.end() && it->second.joined_round == r.round()) {
      it->second.joined_nproc = 0;  // not joined: the slots are free again
      MaybeForgetLocked(job);
    }
    return;
  }
  LOG(INFO) << "joined job " << job << " round " << resp->round()
            << (resp->spare() ? " as a spare" : "") << " (port " << r.master_port()
            << ")";
}

void Daemon::HandleStart(const v1::StartAttempt& start) {
  const std::string& job = start.job_id();
  const int64_t round = start.assignment().round();
  const int nproc = LocalNproc(start, options_.node_id);
  // Before the lock: the lookup may block (NSS), and mu_ serves the
  // heartbeats, the workers' progress and every other command.
  const absl::StatusOr<WorkerUser> user =
      ResolveWorkerUser(start.spec(), job, options_.node_id, geteuid(), getegid());
  std::vector<Launched> launches;
  uint64_t stop_id = 0;
  bool refused = false;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    if (RanLocked(JobKeyLocked(job), round)) return;  // already ran: never twice
    JobHere& j = jobs_[job];
    if (j.current && j.current->round >= round) return;  // it runs, or a newer one
    if (j.next && j.next->assignment().round() >= round) return;
    const int others = SlotsOfOthersLocked(job, /*live_only=*/true);
    j.joined_nproc = 0;  // the attempt takes the join's slots over
    if (others + nproc > options_.slots) {
      LOG(ERROR) << "cannot start job " << job << " round " << round << " with " << nproc
                 << " workers: " << others << " of this node's " << options_.slots
                 << " slots are taken by " << HoldersLocked(job);
      MarkRanLocked(JobKeyLocked(job), round);
      reports_.Add(FailureReport(
          options_.node_id, job, round,
          NotStartedFailure(
              options_.node_id, round,
              absl::StrCat("elastrund on ", options_.node_id, ": ", options_.slots,
                           " slots, ", others, " taken by ", HoldersLocked(job),
                           "; no room for ", nproc, " workers"),
              /*cannot_start=*/false)));
      MaybeForgetLocked(job);
      refused = true;
    } else if (j.current) {
      // An older attempt still stopping (or stale): this one starts when
      // it has ended.
      j.next = start;
      j.next_user = user;
      if (!j.current->stop_requested) {
        LOG(WARNING) << "attempt " << job << "/" << j.current->round
                     << " still runs; stopping it for round " << round;
        j.current->stop_requested = true;
        if (j.current->on_runner) stop_id = j.current->runner_id;
      }
    } else if (SlotsOfOthersLocked(job, /*live_only=*/false) + nproc > options_.slots) {
      LOG(INFO) << "job " << job << " round " << round << " waits for "
                << HoldersLocked(job) << " to end";
      j.next = start;
      j.next_user = user;
    } else if (std::optional<Launched> l = Launch(start, user)) {
      launches.push_back(*std::move(l));
    } else {
      MaybeForgetLocked(job);  // nothing runs: its report is queued
    }
  }
  if (stop_id != 0) runner_->Stop(stop_id, SIGTERM);
  if (refused) SendReports();
  StartOnRunner(std::move(launches));
}

std::string Daemon::JobKeyLocked(const std::string& job) const {
  return cluster_id_.empty() ? job : absl::StrCat(job, "@", cluster_id_);
}

bool Daemon::RanLocked(const std::string& job, int64_t round) const {
  auto it = ran_.find(job);
  return it != ran_.end() && round <= it->second;
}

void Daemon::MarkRanLocked(const std::string& job, int64_t round) {
  auto [it, added] = ran_.emplace(job, round);
  if (!added) {
    it->second = std::max(it->second, round);
    return;
  }
  ran_order_.push_back(job);
  while (ran_order_.size() > std::max<size_t>(options_.ran_jobs_kept, 1)) {
    ran_.erase(ran_order_.front());
    ran_order_.pop_front();
  }
}

size_t Daemon::RanJobsRecorded() const {
  absl::MutexLock lock(&mu_);
  return ran_.size();
}

std::optional<Daemon::Launched> Daemon::Launch(const v1::StartAttempt& start,
                                               const absl::StatusOr<WorkerUser>& user) {
  const v1::Assignment& a = start.assignment();
  const v1::NodeAssignment* me = nullptr;
  for (const v1::NodeAssignment& n : a.nodes()) {
    if (n.node_id() == options_.node_id) me = &n;
  }
  const std::string job_key = JobKeyLocked(start.job_id());
  MarkRanLocked(job_key, a.round());
  if (me == nullptr) {
    LOG(ERROR) << "StartAttempt for job " << start.job_id() << " round " << a.round()
               << " does not name this node; ignored";
    return std::nullopt;
  }
  ending_.erase(start.job_id());  // the job is (back) here
  const absl::StatusOr<std::string> folder =
      user.ok() ? PrepareAttemptFolders(start, node_, job_key, *user)
                : absl::StatusOr<std::string>(user.status());
  if (!folder.ok()) {
    reports_.Add(
        FailureReport(options_.node_id, start.job_id(), a.round(),
                      NotStartedFailure(options_.node_id, a.round(),
                                        absl::StrCat("elastrund on ", options_.node_id,
                                                     ": ", folder.status().message()),
                                        /*cannot_start=*/true)));
    return std::nullopt;
  }
  const std::string& attempt_dir = *folder;
  AttemptSpec spec =
      BuildNodeAttempt(start, node_, *user, attempt_dir,
                       snapshots_.FolderFor(start.job_id(), user->uid, user->gid));
  if (options_.on_output_line) {
    // Tagged here, per attempt: lines of several jobs interleave.
    spec.on_output_line = [hook = options_.on_output_line, job = start.job_id(),
                           r = a.round()](const OutputLine& line) { hook(job, r, line); };
  }

  Attempt attempt;
  attempt.runner_id = next_runner_id_++;
  attempt.job_id = start.job_id();
  attempt.round = a.round();
  attempt.nproc = me->local_world_size();
  attempt.attempt_dir = attempt_dir;
  jobs_[start.job_id()].current = attempt;
  LOG(INFO) << "starting job " << start.job_id() << " round " << a.round() << ": group rank "
            << me->group_rank() << " of " << a.group_world_size() << ", ranks "
            << me->rank_offset() << ".." << me->rank_offset() + me->local_world_size() - 1
            << " of " << a.world_size() << ", master " << a.master_addr() << ":"
            << a.master_port();
  if (auto failed = failed_at_.find(attempt.job_id); failed != failed_at_.end()) {
    if (options_.metrics != nullptr) {
      options_.metrics->Restarted(options_.clock->Now() - failed->second);
    }
    failed_at_.erase(failed);
  }
  return Launched{attempt.runner_id, attempt.job_id, attempt.round, std::move(spec)};
}

std::vector<Daemon::Launched> Daemon::LaunchQueuedLocked() {
  std::vector<Launched> out;
  if (shutting_down_) return out;
  std::vector<std::string> failed;
  for (auto& [job, j] : jobs_) {
    if (!j.next || j.current) continue;
    const int nproc = LocalNproc(*j.next, options_.node_id);
    if (SlotsOfOthersLocked(job, /*live_only=*/false) + nproc > options_.slots) continue;
    const v1::StartAttempt start = *std::move(j.next);
    j.next.reset();
    if (std::optional<Launched> l = Launch(start, j.next_user)) {
      out.push_back(*std::move(l));
    } else {
      failed.push_back(job);
    }
  }
  for (const std::string& job : failed) MaybeForgetLocked(job);
  return out;
}

void Daemon::StartOnRunner(std::vector<Launched> launches) {
  for (Launched& launch : launches) {
    if (options_.on_attempt_start) options_.on_attempt_start(launch.job_id, launch.round);
    if (options_.metrics != nullptr) {
      options_.metrics->AttemptStarted(static_cast<int>(launch.spec.workers.size()));
    }
    const uint64_t id = launch.runner_id;
    runner_->Start(id, std::move(launch.spec),
                   [this, id](const AttemptOutcome& outcome) { OnAttemptEnded(id, outcome); });
    int stop_signal = 0;
    {
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(launch.job_id);
      if (it != jobs_.end() && it->second.current &&
          it->second.current->runner_id == id) {
        Attempt& a = *it->second.current;
        a.on_runner = true;
        if (a.stop_requested) stop_signal = a.stop_signal;
      }
    }
    // Stopped (Shutdown, a stop command) while it was being handed over.
    if (stop_signal != 0) runner_->Stop(id, stop_signal);
  }
  SendReports();  // a launch that failed queued its report
}

void Daemon::HandleStop(const std::string& job_id, std::optional<int64_t> round) {
  uint64_t stop_id = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    JobHere& j = it->second;
    // A stop for round g also covers older rounds: they are stale too.
    if (j.next && (!round || j.next->assignment().round() <= *round)) j.next.reset();
    if (j.joined_nproc > 0 && (!round || j.joined_round <= *round)) j.joined_nproc = 0;
    if (j.current && (!round || j.current->round <= *round) && !j.current->stop_requested) {
      j.current->stop_requested = true;
      if (j.current->on_runner) stop_id = j.current->runner_id;
      LOG(INFO) << "stopping job " << job_id << " round " << j.current->round;
    }
    MaybeForgetLocked(job_id);
  }
  if (stop_id != 0) runner_->Stop(stop_id, SIGTERM);
}

void Daemon::OnAttemptEnded(uint64_t id, const AttemptOutcome& outcome) {
  std::vector<Launched> launches;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.begin();
    while (it != jobs_.end() &&
           !(it->second.current && it->second.current->runner_id == id))
      ++it;
    if (it == jobs_.end()) {
      LOG(ERROR) << "end of unknown attempt " << id << " ignored";
      return;
    }
    const Attempt a = *it->second.current;
    it->second.current.reset();
    ++ending_calls_;  // until this call is done with the Daemon (WaitIdle)
    if (options_.metrics != nullptr) {
      options_.metrics->AttemptEnded(a.nproc, outcome);
      if (outcome.kind == AttemptOutcome::Kind::kFailed && !a.stop_requested) {
        failed_at_[a.job_id] = options_.clock->Now();
      }
    }
    QueueEndReport(a, outcome);
    MaybeForgetLocked(a.job_id);
    MaybeFinishEndingLocked(a.job_id);
    // Its slots are free: queued attempts of any job may fit now.
    launches = LaunchQueuedLocked();
  }
  CallJobsDone();
  StartOnRunner(std::move(launches));
  absl::MutexLock lock(&mu_);
  --ending_calls_;
}

void Daemon::ForgetJoins() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> jobs;
  for (auto& [job, j] : jobs_) {
    j.joined_nproc = 0;
    jobs.push_back(job);
  }
  for (const std::string& job : jobs) MaybeForgetLocked(job);
}

void Daemon::Shutdown(int sig) {
  std::vector<uint64_t> stop_ids;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (auto& [job, j] : jobs_) {
      j.next.reset();
      j.joined_nproc = 0;
      if (j.current && !j.current->stop_requested) {
        j.current->stop_requested = true;
        j.current->stop_signal = sig;
        if (j.current->on_runner) stop_ids.push_back(j.current->runner_id);
      }
    }
    // The node leaves every job: folders go as their attempts end.
    for (const std::string& job : snapshots_.Jobs()) {
      ending_.insert(job);
      MaybeFinishEndingLocked(job);
    }
  }
  CallJobsDone();
  for (uint64_t id : stop_ids) runner_->Stop(id, sig);
}

bool Daemon::WaitCallsDone(absl::Duration timeout) { return lanes_.WaitIdle(timeout); }

bool Daemon::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [job, j] : jobs_) {
      if (j.current || j.next) return false;
    }
    return ending_calls_ == 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

int Daemon::SlotsOfOthersLocked(const std::string& except, bool live_only) const {
  int total = 0;
  for (const auto& [job, j] : jobs_) {
    if (job == except) continue;
    int held = 0;
    if (j.current && (!live_only || !j.current->stop_requested)) held = j.current->nproc;
    if (live_only) {
      if (j.next) held = std::max(held, LocalNproc(*j.next, options_.node_id));
      held = std::max(held, j.joined_nproc);
    }
    total += held;
  }
  return total;
}

std::string Daemon::HoldersLocked(const std::string& except) const {
  std::string out;
  for (const auto& [job, j] : jobs_) {
    if (job == except) continue;
    int held = j.current ? j.current->nproc : 0;
    if (j.next) held = std::max(held, LocalNproc(*j.next, options_.node_id));
    held = std::max(held, j.joined_nproc);
    if (held == 0) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ", "job ", job, " (", held,
                    held == 1 ? " slot" : " slots",
                    j.current && j.current->stop_requested ? ", stopping" : "", ")");
  }
  return out.empty() ? "nothing" : out;
}

void Daemon::MaybeFinishEndingLocked(const std::string& job_id) {
  if (!ending_.count(job_id)) return;
  if (auto it = jobs_.find(job_id);
      it != jobs_.end() && (it->second.current || it->second.next)) {
    return;  // its workers may still write there
  }
  ending_.erase(job_id);
  snapshots_.Remove(job_id);
  jobs_done_.push_back(job_id);
}

void Daemon::CallJobsDone() {
  std::vector<std::string> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(jobs_done_);
  }
  if (!options_.on_job_done) return;
  for (const std::string& job : done) options_.on_job_done(job);
}

void Daemon::MaybeForgetLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  const JobHere& j = it->second;
  if (!j.current && !j.next && j.joined_nproc == 0) jobs_.erase(it);
}

}  // namespace elastrun::launcher
