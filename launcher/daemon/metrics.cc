#include "launcher/daemon/metrics.h"

namespace elastrun::launcher {
namespace {

constexpr char kExitsHelp[] =
    "Worker processes that exited, by cause: success (exit 0), exit_code and signal "
    "(the failure that ended its attempt), stopped (ended by the group's stop), "
    "cannot_start (the program could not be started).";

metrics::Counter& Exits(metrics::Registry& r, const char* cause) {
  return r.GetCounter("elastrund_worker_exits_total", kExitsHelp, {{"cause", cause}});
}

}  // namespace

DaemonMetrics::DaemonMetrics(metrics::Registry& r)
    : attempts_(r.GetCounter("elastrund_attempts_started_total",
                             "Attempts (one job's worker group of one round) started.")),
      exit_success_(Exits(r, "success")),
      exit_code_(Exits(r, "exit_code")),
      exit_signal_(Exits(r, "signal")),
      exit_stopped_(Exits(r, "stopped")),
      cannot_start_(Exits(r, "cannot_start")),
      restart_seconds_(r.GetHistogram(
          "elastrund_restart_seconds",
          "Time from a worker failure detected on this node to the job's workers "
          "started here again, in seconds.",
          metrics::LatencyBuckets())),
      running_workers_(
          r.GetGauge("elastrund_running_workers", "Worker processes running now.")),
      log_bytes_(r.GetCounter("elastrund_log_bytes_forwarded_total",
                              "Bytes of worker output the service accepted.")) {}

void DaemonMetrics::AttemptStarted(int workers) {
  attempts_.Increment();
  running_workers_.Add(workers);
}

void DaemonMetrics::AttemptEnded(int workers, const AttemptOutcome& outcome) {
  running_workers_.Add(-workers);
  if (!outcome.spawn_error.ok()) cannot_start_.Increment();
  for (const WorkerExit& e : outcome.exits) {
    if (e.ok()) {
      exit_success_.Increment();
    } else if (outcome.first_failure && outcome.first_failure->local_rank == e.local_rank) {
      (e.signal != 0 ? exit_signal_ : exit_code_).Increment();
    } else {
      exit_stopped_.Increment();
    }
  }
}

void DaemonMetrics::Restarted(absl::Duration latency) {
  restart_seconds_.Observe(absl::ToDoubleSeconds(latency));
}

}  // namespace elastrun::launcher
