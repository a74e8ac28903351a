// `elastrun evolve` on a cluster: each individual is one job of the
// rendezvous service (evolve/evolve_backend.h's TrialBackend over the Jobs
// API), named evolve-<run>-<G>-<I> where <run> is a random id kept in the
// output folder. The jobs of a run are written to evolve_jobs.csv as they
// are submitted; a resumed evolve adopts the jobs it finds there, or by
// name on the service (a submit whose answer was lost), instead of
// submitting them again.
#ifndef ELASTRUN_LAUNCHER_CLI_EVOLVE_CLUSTER_H_
#define ELASTRUN_LAUNCHER_CLI_EVOLVE_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "elastrun/v1/types.pb.h"
#include "evolve/evolve_backend.h"
#include "launcher/cli/client.h"

namespace elastrun::launcher {

struct EvolveClusterOptions {
  std::unique_ptr<JobsClient> client;
  // Every individual's job starts from this spec (nodes, workers, restarts,
  // working folder, exported environment); name, argv and the
  // individual's env are set per individual.
  v1::JobSpec base;
  std::string output_dir;  // the run's folder: evolve_run_id, evolve_jobs.csv
  absl::Duration poll = absl::Milliseconds(100);  // between two looks at the jobs
  // How long a service that cannot be reached is retried before the run
  // stops (--retry-for); --resume continues it.
  absl::Duration retry_for = absl::Seconds(60);
  std::function<void(absl::Duration)> sleep;  // empty: absl::SleepFor
};

// Reads (or creates) the run's id and journal and, when the journal
// exists, lists the service's jobs to adopt. Errors: the folder cannot be
// written; the service cannot be reached (Unavailable) or refuses the
// caller.
absl::StatusOr<std::unique_ptr<evolve::TrialBackend>> NewClusterBackend(
    EvolveClusterOptions options);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_EVOLVE_CLUSTER_H_
