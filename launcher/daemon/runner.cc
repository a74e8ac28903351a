#include "launcher/daemon/runner.h"

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace elastrun::launcher {

AgentRunner::AgentRunner(Agent* agent) : agent_(agent), thread_([this] { Loop(); }) {}

AgentRunner::~AgentRunner() {
  {
    absl::MutexLock lock(&mu_);
    quit_ = true;
  }
  thread_.join();
}

void AgentRunner::Start(uint64_t id, AttemptSpec spec,
                        std::function<void(const AttemptOutcome&)> done) {
  absl::MutexLock lock(&mu_);
  CHECK_EQ(active_, 0u) << "attempt " << id << " started while " << active_ << " runs";
  active_ = id;
  stop_asked_ = false;
  pending_ = Job{id, std::move(spec), std::move(done)};
}

void AgentRunner::Stop(uint64_t id, int sig) {
  absl::MutexLock lock(&mu_);
  if (id != active_) return;
  stop_asked_ = true;
  // A stop asked before RunAttempt began applies to it (Agent's contract).
  agent_->RequestStop(sig);
}

void AgentRunner::Loop() {
  for (;;) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return pending_.has_value() || quit_;
      };
      mu_.Await(absl::Condition(&ready));
      if (!pending_) return;  // quit with nothing to run
      job = *std::move(pending_);
      pending_.reset();
    }
    absl::StatusOr<AttemptOutcome> outcome;
    for (;;) {
      // RunAttempt consumes the spec; keep a copy for a re-run.
      outcome = agent_->RunAttempt(job.spec);
      absl::MutexLock lock(&mu_);
      // Agent::RequestStop is not scoped to an attempt: a Stop for the
      // previous attempt that raced with its end stops this one at once. No
      // one asked this attempt to stop and the daemon got no signal: run it
      // again (the stray request is consumed by the run that just ended).
      if (outcome.ok() && outcome->kind == AttemptOutcome::Kind::kStopped && !stop_asked_ &&
          agent_->received_signal() == 0) {
        LOG(WARNING) << "attempt " << job.id << " stopped by a stale stop request; re-running";
        continue;
      }
      active_ = 0;
      break;
    }
    if (!outcome.ok()) {
      // The agent itself failed (epoll, signalfd, log files): report it as
      // a failure to start the workers.
      LOG(ERROR) << "attempt " << job.id << ": " << outcome.status();
      AttemptOutcome failed;
      failed.kind = AttemptOutcome::Kind::kFailed;
      failed.spawn_error = outcome.status();
      outcome = failed;
    }
    job.done(*outcome);
  }
}

}  // namespace elastrun::launcher
