// Detection metrics as YOLOv5 computes them (utils/metrics.py, val.py):
// predictions matched to labels at the IoU thresholds 0.5:0.05:0.95,
// precision, recall and F1 at the confidence of the best mean F1, AP per
// class (101-point interpolation, COCO's), mAP@0.5, mAP@0.5:0.95, and the
// fitness that picks the best epoch. Torch-free: the IoU of predictions
// with labels comes in as numbers (detect/boxes.h's BoxIou computes it).
//
// An evaluation over several ranks: each rank adds its images to its own
// DetectionStats, serializes it to doubles, the ranks all-gather them, and
// MergeGathered rebuilds the whole evaluation on every rank; its Summarize
// equals that of one process that saw every image.
//
// Thread-safety: free functions are pure; a DetectionStats is not
// thread-safe (one owner).
#ifndef ELASTRUN_TRAINER_DETECT_AP_H_
#define ELASTRUN_TRAINER_DETECT_AP_H_

#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace elastrun::trainer::detect {

inline constexpr int kNumIouThresholds = 10;

// 0.5, 0.55, ..., 0.95: the IoU thresholds of mAP@0.5:0.95 (index 0: mAP@0.5).
const std::array<double, kNumIouThresholds>& IouThresholds();

// Of one prediction: whether it is a true positive at each IoU threshold.
using Correct = std::array<bool, kNumIouThresholds>;

// YOLOv5's process_batch. `iou` is labels x predictions, row-major
// (iou[l * num_predictions + p]); the predictions come in decreasing
// confidence, as NMS returns them. At each threshold t, each prediction
// picks the label of its class with the highest IoU >= t (equal IoUs: the
// later label); each label then counts only the first prediction that
// picked it. Returns one Correct per prediction.
// InvalidArgument unless iou has label_classes.size() *
// pred_classes.size() entries, none of them NaN.
absl::StatusOr<std::vector<Correct>> MatchPredictions(
    absl::Span<const double> iou, absl::Span<const int64_t> label_classes,
    absl::Span<const int64_t> pred_classes);

enum class ApMethod {
  kInterp101,   // mean of the envelope at 101 recalls (trapezoids), COCO's; YOLOv5's
                // default
  kContinuous,  // area under the envelope where recall changes (VOC 2010+)
};

struct ApCurve {
  double ap = 0;
  // The curve with its sentinels: recall 0, ..., 1; precision 1, ..., 0,
  // made non-increasing (the envelope).
  std::vector<double> recall;
  std::vector<double> precision;
};

// YOLOv5's compute_ap: AP of one class from its recall and precision after
// each prediction (by decreasing confidence).
// InvalidArgument unless both have the same size.
absl::StatusOr<ApCurve> ComputeAp(absl::Span<const double> recall,
                                  absl::Span<const double> precision,
                                  ApMethod method = ApMethod::kInterp101);

// The curves below are sampled at kCurvePoints points of [0, 1]
// (np.linspace(0, 1, 1000)): confidences, or recalls for the PR curve.
inline constexpr int kCurvePoints = 1000;
const std::vector<double>& CurveGrid();

// One class's row of ap_per_class.
struct ClassAp {
  int64_t cls = 0;
  int64_t num_labels = 0;
  int64_t num_predictions = 0;
  // At the confidence of the best smoothed mean F1 over classes.
  double precision = 0;
  double recall = 0;
  double f1 = 0;
  // YOLOv5's rounded true and false positives at that confidence.
  double tp = 0;
  double fp = 0;
  // AP at each IoU threshold; ap[0] is AP@0.5.
  std::array<double, kNumIouThresholds> ap{};
  double ap50() const { return ap[0]; }
  double ap50_95() const;  // the mean of ap
  // Precision, recall and F1 at each confidence of CurveGrid(), and the
  // precision envelope at each recall of CurveGrid() (IoU 0.5): the data
  // of YOLOv5's P, R, F1 and PR curves. Zeros for a class without
  // predictions.
  std::vector<double> precision_curve;
  std::vector<double> recall_curve;
  std::vector<double> f1_curve;
  std::vector<double> pr_curve;
};

struct ApPerClassResult {
  // One per class that has labels, by increasing class.
  std::vector<ClassAp> classes;
  // The confidence (a point of CurveGrid()) where precision and recall are read.
  double confidence = 0;
};

// YOLOv5's ap_per_class over the predictions of an evaluation: `tp` (from
// MatchPredictions), `conf` and `pred_cls` per prediction, `target_cls`
// per label. Predictions are ranked by decreasing confidence; equal
// confidences keep their order (a stable sort; YOLOv5's np.argsort is not
// stable, so there the order of ties is numpy's). Predictions of classes
// without labels do not count.
// InvalidArgument unless tp, conf and pred_cls have one entry per
// prediction, no confidence is NaN and no class has more true positives
// at a threshold than labels.
absl::StatusOr<ApPerClassResult> ApPerClass(absl::Span<const Correct> tp,
                                            absl::Span<const double> conf,
                                            absl::Span<const int64_t> pred_cls,
                                            absl::Span<const int64_t> target_cls);

// What an evaluation reports (YOLOv5's val.py), means over the classes
// with labels; all zero when no prediction is a true positive.
struct DetectionSummary {
  int64_t images = 0;
  int64_t labels = 0;
  int64_t predictions = 0;
  double precision = 0;  // mp
  double recall = 0;     // mr
  double map50 = 0;      // mAP@0.5
  double map50_95 = 0;   // mAP@0.5:0.95
  // Per class with labels (empty when no prediction is a true positive).
  ApPerClassResult per_class;
  // [num_classes]: the labels of each class.
  std::vector<int64_t> labels_per_class;
  // [num_classes]: each class's AP@0.5:0.95; map50_95 for classes without
  // labels (YOLOv5's maps, its image weights' input).
  std::vector<double> maps;
};

// fitness = precision * P + recall * R + map50 * mAP@0.5 + map50_95 * mAP@0.5:0.95.
struct FitnessWeights {
  double precision = 0;
  double recall = 0;
  double map50 = 0.1;
  double map50_95 = 0.9;
};

// InvalidArgument naming the field unless every weight is finite and >= 0.
absl::Status ValidateFitnessWeights(const FitnessWeights& weights);

// YOLOv5's fitness of an evaluation (higher is better).
double Fitness(const DetectionSummary& summary, const FitnessWeights& weights = {});

// The per-image statistics of an evaluation, keyed by image id, and their
// summary. An image id is the image's index in the dataset: ranks that
// share an evaluation give every image the same id, and an image added
// twice (a padded shard repeats the first images) counts once.
class DetectionStats {
 public:
  // Adds one image: its predictions as NMS returns them (`correct` from
  // MatchPredictions, `conf`, `pred_cls`) and the classes of its labels.
  // InvalidArgument unless the prediction spans have equal sizes, conf
  // has no NaN, classes are >= 0 and |image_id| < 2^53 (exact in a
  // double); AlreadyExists when image_id was added.
  absl::Status AddImage(int64_t image_id, absl::Span<const Correct> correct,
                        absl::Span<const double> conf, absl::Span<const int64_t> pred_cls,
                        absl::Span<const int64_t> label_cls);

  // AddImage after MatchPredictions(iou, label_cls, pred_cls); its errors.
  absl::Status AddImageIou(int64_t image_id, absl::Span<const double> iou,
                           absl::Span<const double> conf,
                           absl::Span<const int64_t> pred_cls,
                           absl::Span<const int64_t> label_cls);

  // Adds other's images; ones already here are skipped.
  void Merge(const DetectionStats& other);

  // The statistics as doubles (every value exact), for an all-gather. The
  // first value is the record's length.
  std::vector<double> Serialize() const;

  // The inverse of Serialize. InvalidArgument when `data` is not one whole
  // record (wrong length, values out of range, not integers where counts
  // are, an image twice).
  static absl::StatusOr<DetectionStats> Deserialize(absl::Span<const double> data);

  // The merge of world_size records of `gathered`, each padded to
  // gathered.size() / world_size values (the all-gather of every rank's
  // Serialize(), padded to the longest). Errors as Deserialize, and
  // InvalidArgument unless world_size >= 1 divides gathered.size().
  static absl::StatusOr<DetectionStats> MergeGathered(absl::Span<const double> gathered,
                                                      int64_t world_size);

  // The evaluation's summary over its images in id order (so any split
  // over ranks gives the same), for a dataset of num_classes classes.
  // InvalidArgument unless num_classes >= 1 and every class is below it.
  absl::StatusOr<DetectionSummary> Summarize(int64_t num_classes) const;

  int64_t num_images() const { return static_cast<int64_t>(images_.size()); }

 private:
  struct Image {
    std::vector<Correct> correct;
    std::vector<double> conf;
    std::vector<int64_t> pred_cls;
    std::vector<int64_t> label_cls;
  };
  std::map<int64_t, Image> images_;
};

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_AP_H_
