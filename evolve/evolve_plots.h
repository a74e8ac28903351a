// The plot of `elastrun evolve`, as YOLOv5's plot_evolve draws it: one
// panel per hyperparameter, fitness against the hyperparameter's value, each
// point coloured by how many individuals share its cell of a 20 x 20 grid
// over the panel's data (log scale, a viridis ramp), the best individual
// marked with a black + and its value in the panel's title ("lr0 = 0.01").
// Panels stand five to a row in ONE SVG. Failed individuals have no fitness
// worth plotting: each is a grey tick on the panel's bottom edge at its
// value, left out of the colours, the ranges' fitness and the best.
// Torch-free; functions only, no state.
#ifndef ELASTRUN_EVOLVE_EVOLVE_PLOTS_H_
#define ELASTRUN_EVOLVE_EVOLVE_PLOTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace elastrun::evolve {

// One individual as the plot sees it. (Not evolve_io.h's EvolveRow, the
// whole row of evolve.csv: this is only what a panel draws.)
struct EvolvePlotRow {
  double fitness = 0.0;        // ignored when `failed`
  std::vector<double> values;  // one per hyperparameter, in the names' order;
                               // a missing or non-finite value is not drawn
  bool failed = false;         // drawn as a grey tick at its value
};

// The hyperparameters and individuals read from an evolve.csv.
struct EvolvePlotTable {
  std::vector<std::string> names;
  std::vector<EvolvePlotRow> rows;
};

// The SVG: a line saying what the colours and marks mean, then a panel per
// name, in order. The best is the first ok row of the highest fitness. No
// names: a picture saying there is nothing to plot; no rows (or no ok row):
// empty panels titled by the name alone. Never fails.
std::string RenderEvolveSvg(const std::vector<std::string>& names,
                            const std::vector<EvolvePlotRow>& rows);

// Reads an evolve.csv whose header has a column `fitness`. Its
// hyperparameter columns are the columns after `fitness` that are not
// metrics (named metrics/..., val/..., train/..., test_acc, test_loss or
// train_loss) and not `reason`. A row is ok when its `status` is `ok` or
// `done` (or there is no status column), and failed otherwise. Fields may
// be double-quoted (CSV's "" for a quote); blank lines are skipped.
// Errors: NotFound when the file cannot be read; InvalidArgument naming
// path:line and the fix for a header without `fitness` or without
// hyperparameter columns, a row with another number of fields than the
// header, an ok row whose fitness, or any row whose hyperparameter value,
// is not a number. A last line without its newline that does not parse is
// a row cut short by a writer still running: it is ignored.
absl::StatusOr<EvolvePlotTable> ReadEvolvePlotCsv(const std::string& path);

// ReadEvolvePlotCsv(evolve_csv), rendered, written atomically to svg_path.
// Errors: the reader's, or Internal naming svg_path when it cannot be
// written.
absl::Status WriteEvolvePlot(const std::string& evolve_csv, const std::string& svg_path);

}  // namespace elastrun::evolve

#endif  // ELASTRUN_EVOLVE_EVOLVE_PLOTS_H_
