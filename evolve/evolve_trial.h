// One individual's training as `elastrun evolve` runs it locally: the
// `elastrun run` command line that trains it, how the program receives the
// hyperparameters, and where its metrics are read back.
//
// Two kinds of program:
//   - elastrun-train (the program's basename): the hyperparameters go in as
//     config overrides (a YOLOv5 hyp name `lr0` becomes `++hyp.lr0`,
//     the detector's section; a dotted name such as `optimizer.lr0` is a config
//     key as it is) plus train.output_dir=DIR; the metrics are the last row
//     of DIR/results.csv (the detector) or DIR/metrics.csv (the classifier).
//   - any other program: a YAML of the hyperparameters at DIR/hyp.yaml,
//     named by $ELASTRUN_HYP and replacing `{hyp}` in its arguments (`{dir}`
//     becomes DIR); the metrics are the last row of its results CSV by
//     column names (--results FILE, relative to DIR), else the JSON object
//     of numbers it writes to $ELASTRUN_RESULTS (DIR/results.json).
// Functions only; no state.
#ifndef ELASTRUN_EVOLVE_EVOLVE_TRIAL_H_
#define ELASTRUN_EVOLVE_EVOLVE_TRIAL_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace elastrun::evolve {

// How every individual of a run is launched.
struct TrialLauncher {
  std::string elastrun;               // the `elastrun` binary
  int nproc_per_node = 1;             // `elastrun run --nproc-per-node`
  int max_restarts = 0;               // `elastrun run --max-restarts`
  std::vector<std::string> program;   // PROGRAM ARGS..., not empty
  // The program's results CSV, relative to the individual's folder (or
  // absolute, `{dir}` replaced); "": elastrun-train's, or results.json.
  std::string results_csv;
};

// One individual to train: its hyperparameters by gene name and its folder.
struct Trial {
  std::map<std::string, double> hyp;
  std::string dir;  // the individual's output folder
};

// A command to start: argv[0] is the binary; `env` is added to (and wins
// over) the inherited environment.
struct TrialCommand {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "NAME=value"
};

// Whether `program` is elastrun-train (by its basename).
bool IsTrainer(const std::vector<std::string>& program);

// The config override's left side that takes gene `name` in elastrun-train:
// "++hyp.NAME" for a hyp.yaml name (set or added; the detector checks it),
// the name itself for a dotted config key (which must exist).
std::string TrainerKey(const std::string& name);

// The program's own command line for `trial` (without `elastrun run`):
// elastrun-train's overrides appended, or `{hyp}` and `{dir}` replaced.
std::vector<std::string> ProgramArgs(const TrialLauncher& launcher, const Trial& trial);

// The program's command of `trial`, with the environment it needs. For a
// program other than elastrun-train, writes DIR/hyp.yaml first (and
// removes an old DIR/results.json); Internal naming the file when it cannot
// be written.
absl::StatusOr<TrialCommand> ProgramCommand(const TrialLauncher& launcher, const Trial& trial);

// The `elastrun run --nproc-per-node N --max-restarts R` prefix of `cmd`.
TrialCommand LocalCommand(const TrialLauncher& launcher, TrialCommand cmd);

// The metrics `trial` left behind (see the file comment). NotFound when
// the file is missing; InvalidArgument naming the file when it does not
// parse or holds no row.
absl::StatusOr<std::map<std::string, double>> ReadTrialMetrics(const TrialLauncher& launcher,
                                                               const Trial& trial);

// Every row of the trial's results CSV so far (one per epoch), oldest
// first; for --prune. NotFound while the file is not written yet;
// FailedPrecondition for a program that reports through results.json
// only (no per-epoch rows).
absl::StatusOr<std::vector<std::map<std::string, double>>> ReadTrialRows(
    const TrialLauncher& launcher, const Trial& trial);

}  // namespace elastrun::evolve

#endif  // ELASTRUN_EVOLVE_EVOLVE_TRIAL_H_
