// `elastrun evolve` on this machine: the GA of evolve_ga.h driven
// generation by generation, each individual an `elastrun run` child
// (evolve_trial.h), K at a time; evolve.csv appended as individuals finish,
// hyp_evolve.yaml and evolve_population.yaml rewritten after each
// generation; --resume continues from evolve.csv, never training a
// finished individual again.
#ifndef ELASTRUN_EVOLVE_EVOLVE_RUN_H_
#define ELASTRUN_EVOLVE_EVOLVE_RUN_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "evolve/evolve_ga.h"

namespace elastrun::evolve {

struct EvolveOptions {
  int generations = 10;           // generations to evaluate, >= 1
  int population = 50;            // individuals per generation, >= 2
  std::string hyp_file;           // the fixed genes' values ("": the detector's defaults)
  std::string meta_file;          // the meta table ("": DefaultMeta())
  std::string population_dir;     // the first individuals ("": all random)
  bool resume = false;            // continue the run in output_dir
  int parallel = 1;               // individuals training at once, >= 1
  uint64_t seed = 0;              // the GA's random stream
  FitnessWeights fitness;         // the fitness of an individual's metrics
  int nproc_per_node = 1;         // each individual's workers
  int max_restarts = 0;           // each individual's restarts
  std::string output_dir = "runs/evolve";  // evolve.csv and the individuals' folders
  std::vector<std::string> program;        // PROGRAM ARGS..., not empty
  std::string elastrun;           // the `elastrun` binary ("": this process's)
  const Clock* clock = &RealClock();  // for the ETA
};

// Runs the evolution; progress lines to `out`, errors to `err`. Returns 0
// when every generation was evaluated and at least one individual
// succeeded, 1 when none did or the run stopped on an error (named on
// `err`), 2 for options or input files that are wrong (nothing trained).
int RunEvolve(const EvolveOptions& options, std::ostream& out, std::ostream& err);

}  // namespace elastrun::evolve

#endif  // ELASTRUN_EVOLVE_EVOLVE_RUN_H_
