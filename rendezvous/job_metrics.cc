#include "rendezvous/job_metrics.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "rendezvous/codec.h"

namespace elastrun::rendezvous {
namespace {

// Steps/s is measured over this much of the newest reports: long enough to
// smooth a daemon's once-a-second relay, short enough to show a slowdown.
constexpr absl::Duration kRateWindow = absl::Seconds(30);
// Rounds whose first-report time is kept (the oldest go first).
constexpr size_t kMaxRoundsKept = 1000;

constexpr char kRestartsHelp[] =
    "Rounds ended with the job going on, by cause: failure (a worker failed; counts "
    "against max_restarts), hang (a worker was declared hung), node_lost, scale (a "
    "node joined a running job below its max nodes).";

}  // namespace

ServiceMetrics::ServiceMetrics(metrics::Registry& r)
    : rounds_(r.GetCounter("elastrun_rounds_total",
                           "Rendezvous rounds closed (workers started), every job.")),
      restarts_failure_(
          r.GetCounter("elastrun_restarts_total", kRestartsHelp, {{"cause", "failure"}})),
      restarts_hang_(
          r.GetCounter("elastrun_restarts_total", kRestartsHelp, {{"cause", "hang"}})),
      restarts_node_lost_(
          r.GetCounter("elastrun_restarts_total", kRestartsHelp, {{"cause", "node_lost"}})),
      restarts_scale_(
          r.GetCounter("elastrun_restarts_total", kRestartsHelp, {{"cause", "scale"}})),
      rendezvous_seconds_(r.GetHistogram(
          "elastrun_rendezvous_seconds",
          "Time from a round opening to its closing (every node joined or the last call "
          "ran out), in seconds.",
          metrics::LatencyBuckets())) {}

void ServiceMetrics::RoundClosed(absl::Duration latency) {
  rounds_.Increment();
  rendezvous_seconds_.Observe(absl::ToDoubleSeconds(latency));
}

void ServiceMetrics::Restarted(RoundEnd end, bool hung) {
  switch (end) {
    case RoundEnd::kFailure:
      (hung ? restarts_hang_ : restarts_failure_).Increment();
      break;
    case RoundEnd::kNodeLost:
      restarts_node_lost_.Increment();
      break;
    case RoundEnd::kScaleUp:
      restarts_scale_.Increment();
      break;
    default:  // not a restart: the job ended
      break;
  }
}

void NoteProgress(JobRecord& job, const v1::Progress& p, absl::Time now) {
  if (p.round() < job.rate_round) return;  // a late report of an older round
  if (p.round() > job.rate_round) {
    job.rate_round = p.round();
    job.step_samples.clear();
  }
  if (job.progress_start.emplace(p.round(), now).second &&
      job.progress_start.size() > kMaxRoundsKept) {
    job.progress_start.erase(job.progress_start.begin());
  }
  // Ranks report their own steps; the highest so far stands for the round.
  int64_t step = p.step();
  if (!job.step_samples.empty()) step = std::max(step, job.step_samples.back().second);
  job.step_samples.emplace_back(now, step);
  while (job.step_samples.size() > 2 && job.step_samples.front().first < now - kRateWindow) {
    job.step_samples.pop_front();
  }
}

std::optional<double> StepsPerSecond(const JobRecord& job) {
  if (job.step_samples.size() < 2) return std::nullopt;
  const auto& [t0, s0] = job.step_samples.front();
  const auto& [t1, s1] = job.step_samples.back();
  const double dt = absl::ToDoubleSeconds(t1 - t0);
  if (dt <= 0) return std::nullopt;
  return static_cast<double>(s1 - s0) / dt;
}

std::optional<double> Goodput(const JobRecord& job, absl::Time now) {
  if (!job.core || job.core->finished() || job.progress_start.empty()) return std::nullopt;
  const std::vector<RoundRecord>& rounds = job.core->history();
  const double wall = absl::ToDoubleSeconds(now - rounds.front().opened_time);
  if (wall <= 0) return std::nullopt;
  absl::Duration useful;
  for (const RoundRecord& r : rounds) {
    auto start = job.progress_start.find(r.id);
    if (start == job.progress_start.end()) continue;
    const absl::Time end = r.ended_time ? *r.ended_time : now;
    if (end > start->second) useful += end - start->second;
  }
  return std::min(1.0, absl::ToDoubleSeconds(useful) / wall);
}

std::vector<metrics::Family> JobFamilies(const std::vector<JobRecord*>& jobs, absl::Time now) {
  std::map<std::string, double> by_state;
  for (v1::JobState s : {v1::JOB_STATE_PENDING, v1::JOB_STATE_RUNNING,
                         v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED,
                         v1::JOB_STATE_CANCELLED}) {
    by_state[absl::AsciiStrToLower(v1::JobState_Name(s).substr(10))] = 0;  // "JOB_STATE_"
  }
  metrics::Family steps{"elastrun_job_steps_per_second",
                        "Training steps per second of a running job's current round, "
                        "from its workers' progress reports over the last 30 s.",
                        "gauge",
                        {}};
  metrics::Family goodput{"elastrun_job_goodput",
                          "Fraction of a running job's wall time since its first round "
                          "opened with workers running and reporting progress.",
                          "gauge",
                          {}};
  for (const JobRecord* job : jobs) {
    const v1::JobState state =
        job->core ? PublicJobState(job->core->state_snapshot()) : v1::JOB_STATE_PENDING;
    by_state[absl::AsciiStrToLower(v1::JobState_Name(state).substr(10))] += 1;
    if (!job->core || job->core->finished()) continue;
    if (std::optional<double> r = StepsPerSecond(*job)) {
      steps.samples.push_back({{{"job", job->id}}, *r});
    }
    if (std::optional<double> g = Goodput(*job, now)) {
      goodput.samples.push_back({{{"job", job->id}}, *g});
    }
  }
  metrics::Family states{"elastrun_jobs", "Jobs the service knows, by state.", "gauge", {}};
  for (const auto& [state, n] : by_state) states.samples.push_back({{{"state", state}}, n});
  return {states, steps, goodput};
}

}  // namespace elastrun::rendezvous
