// `elastrun evolve`: the GA of evolve_ga.h driven generation by
// generation, each individual a training of a TrialBackend (an `elastrun
// run` child on this machine, or a job of the service), K at a time;
// evolve.csv appended as individuals finish, hyp_evolve.yaml,
// evolve_population.yaml and evolve.svg rewritten after each generation;
// --resume continues from evolve.csv, never training a finished individual
// again; --prune stops hopeless individuals at epoch milestones (ASHA).
#ifndef ELASTRUN_EVOLVE_EVOLVE_RUN_H_
#define ELASTRUN_EVOLVE_EVOLVE_RUN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "evolve/evolve_backend.h"
#include "evolve/evolve_ga.h"

namespace elastrun::evolve {

struct EvolveOptions {
  int generations = 10;           // generations to evaluate, >= 1
  int population = 50;            // individuals per generation, >= 2
  std::string hyp_file;           // the fixed genes' values ("": the detector's defaults)
  std::string meta_file;          // the meta table ("": DefaultMeta() but
                                  // copy_paste and anchors)
  std::string population_dir;     // the first individuals ("": all random)
  bool resume = false;            // continue the run in output_dir
  int parallel = 0;               // individuals training at once (0: 1 locally,
                                  // the whole generation on a service)
  uint64_t seed = 0;              // the GA's random stream
  FitnessWeights fitness;         // the fitness of an individual's metrics
  int nproc_per_node = 1;         // each individual's workers per node
  std::string nnodes = "1";       // each individual's nodes, N or MIN:MAX (a service only)
  int max_restarts = 0;           // each individual's restarts
  std::string output_dir = "runs/evolve";  // evolve.csv and the individuals' folders
  std::vector<std::string> program;        // PROGRAM ARGS..., not empty
  std::string results_csv;        // the program's results CSV (evolve_trial.h)
  bool json = false;              // progress as JSON lines (--output json)
  // --prune: ASHA. Milestones at epochs grace, grace*eta, grace*eta^2, ...;
  // an individual whose fitness at a milestone is below the (1 - 1/eta)
  // quantile of its generation's fitness values there is stopped.
  bool prune = false;
  int prune_grace = 1;
  double prune_eta = 3.0;
  absl::Duration poll = absl::Seconds(1);  // how often --prune reads results
  std::string elastrun;           // the `elastrun` binary ("": this process's)
  const Clock* clock = &RealClock();  // for the ETA
  // Where the individuals train: empty, `elastrun run` children
  // (NewLocalBackend); else called once, after the output folder exists
  // (output_dir absolute), for the service's backend.
  std::function<absl::StatusOr<std::unique_ptr<TrialBackend>>(const EvolveOptions&)> cluster;
};

// Runs the evolution; progress lines to `out`, errors to `err`. Returns 0
// when every generation was evaluated and at least one individual
// succeeded, 1 when none did or the run stopped on an error (named on
// `err`), 2 for options or input files that are wrong (nothing trained).
int RunEvolve(const EvolveOptions& options, std::ostream& out, std::ostream& err);

}  // namespace elastrun::evolve

#endif  // ELASTRUN_EVOLVE_EVOLVE_RUN_H_
