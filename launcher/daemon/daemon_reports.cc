// The Daemon's reports and what its workers send (daemon.h): the end of
// each attempt made into a ReportExit (sent by ExitReports), the attempts
// it runs (told on every registration), and workers' progress and barriers
// routed to their job's attempt.
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "launcher/daemon/daemon.h"
#include "launcher/daemon/reports.h"
#include "launcher/protocol/failure.h"

namespace elastrun::launcher {

using internal::FailureReport;

void Daemon::QueueEndReport(const Attempt& a, const AttemptOutcome& outcome) {
  if (!outcome.unreaped.empty()) {
    LOG(WARNING) << "job " << a.job_id << " round " << a.round << ": "
                 << DescribeUnreaped(outcome.unreaped);
  } else if (outcome.leftovers) {
    LOG(WARNING) << "job " << a.job_id << " round " << a.round
                 << ": some processes could not be reaped after SIGKILL";
  }
  using Kind = AttemptOutcome::Kind;
  // A worker that failed before any stop was asked is a root cause even
  // when a stop followed; exits caused by the stop are not failures.
  if (outcome.kind == Kind::kFailed && !outcome.spawn_error.ok()) {
    reports_.Add(
        FailureReport(options_.node_id, a.job_id, a.round,
                      NotStartedFailure(options_.node_id, a.round,
                                        std::string(outcome.spawn_error.message()),
                                        /*cannot_start=*/true)));
  } else if (outcome.kind == Kind::kFailed && outcome.first_failure) {
    const WorkerExit& e = *outcome.first_failure;
    LOG(INFO) << "job " << a.job_id << " round " << a.round << ": "
              << (e.hung
                      ? DescribeHang(e.rank, e.hung_step, e.hung_for)
                      : absl::StrCat("rank ", e.rank, " failed with ", DescribeExit(e)));
    reports_.Add(FailureReport(options_.node_id, a.job_id, a.round,
                               MakeFailure(options_.node_id, a.round, e, a.attempt_dir)));
  } else if (outcome.kind == Kind::kSucceeded && !a.stop_requested) {
    LOG(INFO) << "job " << a.job_id << " round " << a.round << ": every worker exited 0";
    v1::ReportExitRequest r;
    r.set_job_id(a.job_id);
    r.set_round(a.round);
    r.set_node_id(options_.node_id);
    r.set_succeeded(true);
    reports_.Add(std::move(r));
  } else {
    LOG(INFO) << "job " << a.job_id << " round " << a.round << " stopped";
  }
}

void Daemon::SendReports() { reports_.Send(); }

std::vector<v1::RunningAttempt> Daemon::Running() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::RunningAttempt> out;
  std::set<std::pair<std::string, int64_t>> listed;
  auto add = [&](const std::string& job, int64_t round, bool ended) {
    if (!listed.insert({job, round}).second) return;
    v1::RunningAttempt& a = out.emplace_back();
    a.set_job_id(job);
    a.set_round(round);
    a.set_ended(ended);
  };
  for (const auto& [job, j] : jobs_) {
    if (j.current && !j.current->stop_requested) add(job, j.current->round, false);
  }
  for (const auto& [job, j] : jobs_) {
    if (j.next) add(job, j.next->assignment().round(), true);
  }
  for (const auto& [job, round] : reports_.Rounds()) add(job, round, true);
  return out;
}

size_t Daemon::pending_reports() const { return reports_.size(); }

void Daemon::OnProgress(const ProgressReport& report) {
  std::optional<std::pair<std::string, int64_t>> to;
  {
    absl::MutexLock lock(&mu_);
    to = RouteLocked(report.job_id);
  }
  if (!to) {
    LOG_EVERY_N(WARNING, 100) << "progress report of job '" << report.job_id << "' rank "
                              << report.rank << " fits no attempt on this node; dropped";
    return;
  }
  if (options_.on_progress) options_.on_progress(to->first, to->second, report);
}

void Daemon::OnBarrier(const BarrierArrival& arrival,
                       std::function<void(const absl::Status&)> reply) {
  std::optional<std::pair<std::string, int64_t>> to;
  {
    absl::MutexLock lock(&mu_);
    to = RouteLocked(arrival.job_id);
  }
  if (!to) {
    reply(absl::FailedPreconditionError(
        arrival.job_id.empty()
            ? absl::StrCat("barrier '", arrival.name, "': the worker names no job and ",
                           "node ", options_.node_id, " does not run exactly one")
            : absl::StrCat("barrier '", arrival.name, "': job ", arrival.job_id,
                           " does not run on node ", options_.node_id)));
    return;
  }
  if (!options_.on_barrier) {
    reply(absl::UnimplementedError("this node daemon relays no barriers"));
    return;
  }
  options_.on_barrier(to->first, to->second, arrival, std::move(reply));
}

std::optional<std::pair<std::string, int64_t>> Daemon::RouteLocked(
    const std::string& job_id) const {
  if (!job_id.empty()) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || !it->second.current) return std::nullopt;
    return std::make_pair(job_id, it->second.current->round);
  }
  // No job named (an older worker): unambiguous only with one attempt.
  std::optional<std::pair<std::string, int64_t>> only;
  for (const auto& [job, j] : jobs_) {
    if (!j.current) continue;
    if (only) return std::nullopt;
    only = std::make_pair(job, j.current->round);
  }
  return only;
}

}  // namespace elastrun::launcher
