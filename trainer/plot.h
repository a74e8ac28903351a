// Plots of a run for people: loss, accuracy and lr per epoch as one SVG
// (plain text, no plotting library), redrawn by rank 0 after every epoch
// from metrics.csv, so a resumed run shows its whole history.
#ifndef ELASTRUN_TRAINER_PLOT_H_
#define ELASTRUN_TRAINER_PLOT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/metrics.h"

namespace elastrun::trainer {

// Reads rows written by MetricsWriter. Errors name the file and line.
absl::StatusOr<std::vector<EpochMetrics>> ReadMetricsCsv(const std::string& path);

// An SVG with three panels (train/test loss, test accuracy, lr) over epochs.
std::string RenderSvg(const std::vector<EpochMetrics>& rows);

// ReadMetricsCsv + RenderSvg, written atomically to `svg_path`.
absl::Status WritePlots(const std::string& metrics_csv, const std::string& svg_path);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_PLOT_H_
