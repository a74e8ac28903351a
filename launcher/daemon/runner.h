// The daemon's AttemptRunner on real processes: one thread runs the Agent's
// event loop, which serves every active attempt at once (one per job, each
// in its own process group, reaping only its own processes); another runs
// the attempts' `done` callbacks, so that the reports they send never hold
// up the loop (another attempt's exit, or its SIGKILL deadline).
#ifndef ELASTRUN_LAUNCHER_DAEMON_RUNNER_H_
#define ELASTRUN_LAUNCHER_DAEMON_RUNNER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "launcher/agent/agent.h"
#include "launcher/daemon/daemon.h"

namespace elastrun::launcher {

// Thread-safe. Owns its threads; the destructor waits for the active
// attempts' ends (stop them first) and their callbacks, then joins.
class AgentRunner : public AttemptRunner {
 public:
  // `agent` is not owned and must outlive the runner; it was created (with
  // Agent::Create) before any other thread started. Its loop runs on the
  // runner's thread from now on.
  explicit AgentRunner(Agent* agent);
  ~AgentRunner() override;

  // Several attempts may be active at once, each with its own `id`.
  void Start(uint64_t id, AttemptSpec spec,
             std::function<void(const AttemptOutcome&)> done) override;
  // Reaches attempt `id` only; no-op once it ended (or for an unknown id).
  void Stop(uint64_t id, int sig) override;

 private:
  void Deliver(std::function<void()> callback);
  void CallbackLoop();

  Agent* const agent_;
  absl::Mutex mu_;
  // Active attempts: the daemon's id -> the agent's.
  std::map<uint64_t, Agent::AttemptId> active_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> callbacks_ ABSL_GUARDED_BY(mu_);
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  std::thread callback_thread_;
  std::thread loop_thread_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_RUNNER_H_
