// The daemon's AttemptRunner on real processes: one dedicated thread runs
// each attempt with the Agent (which reaps with waitpid(-1), so one attempt
// at a time per process).
#ifndef ELASTRUN_LAUNCHER_DAEMON_RUNNER_H_
#define ELASTRUN_LAUNCHER_DAEMON_RUNNER_H_

#include <functional>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "launcher/agent/agent.h"
#include "launcher/daemon/daemon.h"

namespace elastrun::launcher {

// Thread-safe. Owns its thread; the destructor waits for the running
// attempt's end (stop it first), then joins.
class AgentRunner : public AttemptRunner {
 public:
  // `agent` is not owned and must outlive the runner; it was created (with
  // Agent::Create) before any other thread started.
  explicit AgentRunner(Agent* agent);
  ~AgentRunner() override;

  void Start(uint64_t id, AttemptSpec spec,
             std::function<void(const AttemptOutcome&)> done) override;
  void Stop(uint64_t id, int sig) override;

 private:
  struct Job {
    uint64_t id = 0;
    AttemptSpec spec;
    std::function<void(const AttemptOutcome&)> done;
  };
  void Loop();

  Agent* const agent_;
  absl::Mutex mu_;
  std::optional<Job> pending_ ABSL_GUARDED_BY(mu_);
  // The attempt started and not ended yet (pending or in RunAttempt).
  uint64_t active_ ABSL_GUARDED_BY(mu_) = 0;
  // Whether Stop reached the active attempt.
  bool stop_asked_ ABSL_GUARDED_BY(mu_) = false;
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_RUNNER_H_
