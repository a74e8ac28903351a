// How an attempt ended, from its supervisor's record: the one place that
// decides between success, failure and stop, so `elastrun run` and elastrund
// agree.
#ifndef ELASTRUN_LAUNCHER_AGENT_OUTCOME_H_
#define ELASTRUN_LAUNCHER_AGENT_OUTCOME_H_

#include "absl/status/status.h"
#include "launcher/agent/attempt_spec.h"
#include "launcher/agent/supervisor.h"

namespace elastrun::launcher {

// `supervisor` has reached kDone; `spawn_error` is why a worker could not be
// started (OK: all started). A failure (a worker's, or a spawn error) wins
// over a stop: a worker that failed first is the root cause even when a
// stop came while the group wound down.
AttemptOutcome ClassifyOutcome(const Supervisor& supervisor, const absl::Status& spawn_error);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_OUTCOME_H_
