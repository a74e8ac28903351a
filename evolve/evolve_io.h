// The files of `elastrun evolve`: the YAMLs it reads (the meta table, a
// hyp.yaml, a folder of individuals) through common/config, and the ones it
// writes (evolve.csv, hyp_evolve.yaml, evolve_population.yaml). Numbers are
// written in the shortest form that reads back exactly, so a resumed run
// recomputes the same generations from evolve.csv's fitness values.
// Functions only; no state.
#ifndef ELASTRUN_EVOLVE_EVOLVE_IO_H_
#define ELASTRUN_EVOLVE_EVOLVE_IO_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "evolve/evolve_ga.h"

namespace elastrun::evolve {

// `value` in the shortest decimal form that parses back to it.
std::string FormatNumber(double value);

// A meta table: a YAML mapping `name: [evolve, lower, upper]` (evolve a
// bool, or a number as in YOLOv5's table, nonzero meaning evolved), in the
// file's order. InvalidArgument naming file:line and the name for anything
// else (not a mapping, not a 3-list, a bound that is not a number);
// NotFound when the file cannot be read.
absl::StatusOr<std::vector<GeneBound>> LoadMeta(const std::string& path);

// A flat YAML mapping of numbers (a hyp.yaml, or one individual). Keys whose
// values are not numbers are an error naming file:line and the key.
absl::StatusOr<std::map<std::string, double>> LoadNumbers(const std::string& path);

// The individuals of the *.yaml / *.yml files of `dir`, in file name order:
// a file holds one individual (a mapping) or several (a list of mappings,
// as evolve_population.yaml). NotFound when `dir` is not a folder.
absl::StatusOr<std::vector<std::map<std::string, double>>> LoadIndividuals(
    const std::string& dir);

// One row of evolve.csv: an individual of a generation, evaluated or failed.
struct EvolveRow {
  int generation = 0;
  int index = 0;
  // "done"; "pruned" (--prune stopped it: fitness and metrics are those of
  // its last milestone); "failed" (fitness 0)
  std::string status;
  double fitness = 0.0;
  std::map<std::string, double> metrics;  // the fitness's metrics it had
  std::vector<double> genes;              // in meta order
  std::string reason;                     // why it failed or was pruned; "" when done
};

// evolve.csv's header: generation,index,status,fitness, the metric names,
// the gene names, reason.
std::string EvolveCsvHeader(const std::vector<std::string>& metric_names,
                            const std::vector<std::string>& gene_names);
// One row in that layout (reason quoted as CSV needs); a metric the row
// lacks is left empty.
std::string EvolveCsvLine(const EvolveRow& row, const std::vector<std::string>& metric_names);

// The rows of an evolve.csv written with this header. InvalidArgument
// (naming path:line) when the header differs (another meta table or
// fitness) or a row does not parse; a last line without its newline (the
// writer was killed mid-line) is ignored.
absl::StatusOr<std::vector<EvolveRow>> ReadEvolveCsv(const std::string& path,
                                                     const std::vector<std::string>& metric_names,
                                                     const std::vector<std::string>& gene_names);

// hyp_evolve.yaml: a comment naming the generation, index, fitness and
// metrics of `best`, then every gene as `name: value`.
std::string HypEvolveYaml(const EvolveRow& best, const std::vector<GeneBound>& meta);

// evolve_population.yaml: a list of individuals, each a mapping of every
// gene, headed by a comment per individual with its fitness. LoadIndividuals
// reads it back.
std::string PopulationYaml(const std::vector<Individual>& population,
                           const std::vector<GeneBound>& meta, int generation);

// `text` into `path` through a temporary file and a rename, so a reader
// never sees half of it. Internal naming the path on failure.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace elastrun::evolve

#endif  // ELASTRUN_EVOLVE_EVOLVE_IO_H_
