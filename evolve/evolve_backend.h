// Where the individuals of `elastrun evolve` train: an interface with two
// implementations, K `elastrun run` children on this machine
// (NewLocalBackend, here) and jobs of the rendezvous service
// (launcher/cli/evolve_cluster.h, which knows the Jobs API).
#ifndef ELASTRUN_EVOLVE_EVOLVE_BACKEND_H_
#define ELASTRUN_EVOLVE_EVOLVE_BACKEND_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "evolve/evolve_trial.h"

namespace elastrun::evolve {

// A training that ended.
struct TrialEnd {
  std::string name;        // as given to Start
  bool succeeded = false;  // exit 0 / job SUCCEEDED
  std::string reason;      // why not, when !succeeded
};

class TrialBackend {
 public:
  virtual ~TrialBackend() = default;
  // Starts training `name` (unique in the run: "ind_G_I") with the
  // program's command `cmd`; its output goes to (or, for a job, is copied
  // at its end into) `log`. A backend that finds `name` already started by
  // an earlier evolve of the same run adopts it instead of starting it
  // twice. An error means the individual could not be started (it fails);
  // the run goes on.
  virtual absl::Status Start(const std::string& name, const TrialCommand& cmd,
                             const std::string& log) = 0;
  // The next started training to end, waiting at most `timeout` (nullopt
  // when none ended by then). An error stops the run.
  virtual absl::StatusOr<std::optional<TrialEnd>> WaitAny(absl::Duration timeout) = 0;
  // Stops a running training (--prune); it then ends as WaitAny reports.
  virtual absl::Status Stop(const std::string& name, const std::string& why) = 0;
  // Where the individual runs, for the progress lines ("job evo-1-0-3").
  virtual std::string Where(const std::string& name) const = 0;
  // How many started trainings still wait for slots (a job the service
  // has queued), as of the last WaitAny.
  virtual int Waiting() const { return 0; }
};

// `elastrun run --nproc-per-node N --max-restarts R PROGRAM ARGS` children
// of this process, each in its own process group with its output in `log`;
// they get SIGTERM if this process dies (a lost evolve leaves no training
// behind; --resume trains those individuals again).
std::unique_ptr<TrialBackend> NewLocalBackend(const TrialLauncher& launcher);

// Runs `cmd` on this machine to its end, its output into `log`: "" when it
// exited 0, else how it ended ("exit code 2", "killed by signal 9").
absl::StatusOr<std::string> RunToEnd(const TrialCommand& cmd, const std::string& log);

}  // namespace elastrun::evolve

#endif  // ELASTRUN_EVOLVE_EVOLVE_BACKEND_H_
