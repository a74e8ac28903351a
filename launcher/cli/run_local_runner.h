// The Daemon builds each attempt from the job spec, which is the host's:
// this runner, between the Daemon and the AgentRunner, makes it this node's
// own (`elastrun run`'s multi-node form, run_multinode.h).
#ifndef ELASTRUN_LAUNCHER_CLI_RUN_LOCAL_RUNNER_H_
#define ELASTRUN_LAUNCHER_CLI_RUN_LOCAL_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "launcher/cli/run_options.h"
#include "launcher/daemon/daemon.h"

namespace elastrun::launcher {

// Makes each attempt run this node's own command line, console settings
// (--redirects, --tee, --local-ranks-filter) and run id, as torchrun runs
// each node's own arguments, and says the node's place in the round on
// stderr. Thread-safe as `inner` is; holds no state of its own.
class LocalAttemptRunner : public AttemptRunner {
 public:
  // `options` and `inner` are not owned and must outlive the runner.
  LocalAttemptRunner(const RunOptions& options, AttemptRunner* inner);

  void Start(uint64_t id, AttemptSpec spec,
             std::function<void(const AttemptOutcome&)> done) override;
  void Stop(uint64_t id, int sig) override { inner_->Stop(id, sig); }

  // "round 2: group rank 1 of 2 node(s), ranks 2..3 of world size 4,
  // restart 1 of 3": where this node stands, from a worker's environment
  // (the round's assignment).
  static std::string Describe(const std::vector<std::string>& env, int max_restarts);

 private:
  const RunOptions& o_;
  AttemptRunner* const inner_;
  const std::vector<std::string> argv_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_RUN_LOCAL_RUNNER_H_
