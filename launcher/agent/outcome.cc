#include "launcher/agent/outcome.h"

namespace elastrun::launcher {

AttemptOutcome ClassifyOutcome(const Supervisor& supervisor, const absl::Status& spawn_error) {
  AttemptOutcome outcome;
  outcome.exits = supervisor.exits();
  outcome.first_failure = supervisor.first_failure();
  outcome.leftovers = supervisor.leftovers();
  outcome.unreaped = supervisor.unreaped();
  outcome.spawn_error = spawn_error;
  if (!spawn_error.ok() || supervisor.first_failure()) {
    outcome.kind = AttemptOutcome::Kind::kFailed;
  } else if (supervisor.stop_signal() != 0) {
    outcome.kind = AttemptOutcome::Kind::kStopped;
    outcome.stop_signal = supervisor.stop_signal();
  } else {
    // A worker that exited 0 while another ended with no exit seen (which
    // cannot happen once kDone) would be a failure, not a success.
    outcome.kind = supervisor.succeeded() ? AttemptOutcome::Kind::kSucceeded
                                          : AttemptOutcome::Kind::kFailed;
  }
  return outcome;
}

}  // namespace elastrun::launcher
