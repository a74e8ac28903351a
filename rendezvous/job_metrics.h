// The service's Prometheus metrics (README, "Metrics"): counters kept as
// rounds change (updated under the Coordinator's lock, which is held
// anyway), and the per-job gauges computed at scrape time from the job
// records.
//
// Goodput of a job: the fraction of the wall time since its round 0 opened
// during which its workers ran and made progress, i.e. the sum over rounds
// of [the round's first progress report, the round's end or now], divided
// by (now - round 0 opened). Rendezvous, restarts, start-up and resume
// before the first report count as lost time. Only jobs whose workers
// report progress (worker library, trainer) have a goodput, and only while
// they are not finished; the first-report times are kept in memory, so a
// restarted service counts a round from the first report it received.
#ifndef ELASTRUN_RENDEZVOUS_JOB_METRICS_H_
#define ELASTRUN_RENDEZVOUS_JOB_METRICS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/metrics.h"
#include "rendezvous/job_table.h"

namespace elastrun::rendezvous {

// The service's event-driven metrics, registered in `registry` at
// construction. Thread-safe (metrics are).
class ServiceMetrics {
 public:
  explicit ServiceMetrics(metrics::Registry& registry);

  // A round closed `latency` after it opened.
  void RoundClosed(absl::Duration latency);
  // A round ended and the next one opened, for `end` (a kRoundEnded
  // event's); `hung`: the failure that ended it was a hang.
  void Restarted(RoundEnd end, bool hung);

 private:
  metrics::Counter& rounds_;
  metrics::Counter& restarts_failure_;
  metrics::Counter& restarts_hang_;
  metrics::Counter& restarts_node_lost_;
  metrics::Counter& restarts_scale_;
  metrics::Histogram& rendezvous_seconds_;
};

// Notes a progress report of `job` received at `now`, for steps/s and
// goodput.
void NoteProgress(JobRecord& job, const v1::Progress& progress, absl::Time now);

// Steps per second of the job's current round over the last 30 s of
// reports; nullopt with fewer than two reports in the round.
std::optional<double> StepsPerSecond(const JobRecord& job);

// See the file comment; nullopt for a queued or finished job, or one that
// never reported progress.
std::optional<double> Goodput(const JobRecord& job, absl::Time now);

// elastrun_jobs{state}, elastrun_job_steps_per_second{job} and
// elastrun_job_goodput{job}.
std::vector<metrics::Family> JobFamilies(const std::vector<JobRecord*>& jobs, absl::Time now);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_JOB_METRICS_H_
