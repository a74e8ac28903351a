// The detector's plots for people, as SVG (plain text, no plotting
// library; trainer/svg.h draws), after YOLOv5's utils/plots.py:
// results.png (losses and metrics per epoch), labels.jpg (the labels'
// classes, positions and sizes) and PR_curve.png (utils/metrics.py).
//
// Thread-safety: pure functions, but for the file writers.
#ifndef ELASTRUN_TRAINER_DETECT_PLOTS_H_
#define ELASTRUN_TRAINER_DETECT_PLOTS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace elastrun::trainer::detect {

// The header of results.csv, as the detector writes it.
inline constexpr char kResultsHeader[] =
    "epoch,train/box_loss,train/obj_loss,train/cls_loss,metrics/precision,metrics/recall,"
    "metrics/mAP_0.5,metrics/mAP_0.5:0.95,val/box_loss,val/obj_loss,val/cls_loss,x/lr0,x/"
    "lr1,"
    "x/lr2,seconds,images_per_sec";

// One row of results.csv per epoch: the columns of kResultsHeader, in order.
struct ResultsTable {
  std::vector<std::string> columns;       // kResultsHeader's names
  std::vector<std::vector<double>> rows;  // one per epoch, columns.size() values
};

// Reads results.csv. The header must be kResultsHeader (spaces around a
// name are allowed, as YOLOv5 pads them); every other non-empty line must
// hold as many numbers (nan and inf pass; the plots leave them out).
// NotFound when the file cannot be read; DataLoss naming "file:line" and
// what was expected for a wrong header or row.
absl::StatusOr<ResultsTable> ReadResultsCsv(const std::string& path);

// YOLOv5's results.png: 2 x 5 panels titled by their columns (train
// box/obj/cls loss, precision, recall; val box/obj/cls loss, mAP@0.5,
// mAP@0.5:0.95) over epochs, each value with a dot, and from two epochs on
// a dotted line smoothed as YOLOv5 smooths it (scipy's gaussian_filter1d,
// sigma 3, "reflect" ends). Non-finite values are left out; no rows:
// empty panels.
std::string RenderResultsSvg(const ResultsTable& table);

// ReadResultsCsv + RenderResultsSvg, written atomically to `svg_path`.
absl::Status WriteResultsPlot(const std::string& results_csv,
                              const std::string& svg_path);

// YOLOv5's labels.jpg, 2 x 2 panels: instances per class (bars, the class
// names under them while they fit, else class numbers); the shapes of a
// sample of at most 1000 boxes, all centred; the boxes' centres (x, y)
// and sizes (width, height) as 2-D histograms of every box, darker where
// more. `per_class` counts the instances of class i (`names[i]`; missing
// names read "i"); `boxes` are normalised cx, cy, w, h.
std::string RenderLabelsSvg(const std::vector<std::string>& names,
                            const std::vector<int64_t>& per_class,
                            const std::vector<std::array<float, 4>>& boxes);

// YOLOv5's PR_curve.png: precision over recall, one thin line per class
// (its legend "name 0.912" with AP@0.5 when there are at most 21 classes,
// else all grey and no per-class legend) and their mean in bold blue,
// "all classes 0.873 mAP@0.5" (the mean of `ap50`). `pr_curves[i]` is
// class i's precision at each recall of detect/ap.h's CurveGrid()
// (ClassAp::pr_curve): n values at recalls 0, 1/(n-1), ..., 1.
// `names[i]` and `ap50[i]` belong to class i (missing: "i" and 0).
std::string RenderPrCurveSvg(const std::vector<std::string>& names,
                             const std::vector<std::vector<double>>& pr_curves,
                             const std::vector<double>& ap50);

// Writes `svg` to `path` atomically (temporary, fsync, rename). Errors
// name the path and the failing call.
absl::Status WriteSvg(const std::string& path, const std::string& svg);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_PLOTS_H_
