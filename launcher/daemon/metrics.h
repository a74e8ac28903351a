// elastrund's Prometheus metrics (--metrics-listen; names in the README's
// "Metrics"): attempts started, worker exits by cause, restart latency,
// running workers and forwarded log bytes. The Daemon and the LogForwarder
// update them where they already hold their locks or are on their own
// thread; every update is an atomic or a histogram's own short lock.
#ifndef ELASTRUN_LAUNCHER_DAEMON_METRICS_H_
#define ELASTRUN_LAUNCHER_DAEMON_METRICS_H_

#include <cstddef>

#include "absl/time/time.h"
#include "common/metrics.h"
#include "launcher/agent/attempt_spec.h"

namespace elastrun::launcher {

// Thread-safe. The metrics live in `registry`, which must outlive this.
class DaemonMetrics {
 public:
  explicit DaemonMetrics(metrics::Registry& registry);

  // An attempt of `workers` workers was handed to the agent.
  void AttemptStarted(int workers);
  // An attempt of `workers` workers ended with `outcome`: every worker exit
  // is counted by cause (success, exit_code, signal: the attempt's first
  // failure; stopped: exits of a group being stopped; cannot_start).
  void AttemptEnded(int workers, const AttemptOutcome& outcome);
  // A job's workers failed here and started again `latency` later.
  void Restarted(absl::Duration latency);
  metrics::Counter& log_bytes() { return log_bytes_; }

 private:
  metrics::Counter& attempts_;
  metrics::Counter& exit_success_;
  metrics::Counter& exit_code_;
  metrics::Counter& exit_signal_;
  metrics::Counter& exit_stopped_;
  metrics::Counter& cannot_start_;
  metrics::Histogram& restart_seconds_;
  metrics::Gauge& running_workers_;
  metrics::Counter& log_bytes_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_METRICS_H_
