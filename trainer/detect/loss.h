// YOLOv5's loss (utils/loss.py, ComputeLoss), as the paper-like sum of
// three parts over the three levels:
//   box  1 - CIoU of each matched prediction with its target
//   obj  BCE of objectness against the matched predictions' IoU (every
//        cell and anchor; weighted per level by `balance`)
//   cls  BCE of the matched predictions' classes (with label smoothing)
// each times its gain. Targets are matched to anchors whose width and
// height ratio to the target stays under anchor_t, in the target's cell
// and the two neighbouring cells nearest its centre. cls_pw / obj_pw are
// BCE's positive weights; fl_gamma > 0 wraps both BCEs in focal loss.
#ifndef ELASTRUN_TRAINER_DETECT_LOSS_H_
#define ELASTRUN_TRAINER_DETECT_LOSS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "trainer/detect/model.h"
#include "trainer/trainer_pch.h"

namespace elastrun::trainer::detect {

// The loss's hyperparameters (YOLOv5's hyp names).
struct LossOptions {
  double box = 0.05;     // box loss gain
  double cls = 0.5;      // cls loss gain
  double cls_pw = 1.0;   // cls BCE positive weight
  double obj = 1.0;      // obj loss gain (scales with pixels)
  double obj_pw = 1.0;   // obj BCE positive weight
  double anchor_t = 4.0; // anchor-multiple threshold
  double fl_gamma = 0.0; // focal loss gamma (0: plain BCE)
  double label_smoothing = 0.0;
  // Objectness weight per level (strides 8, 16, 32).
  std::vector<double> balance = {4.0, 1.0, 0.4};
};

// The gains as YOLOv5's train.py scales them for the model and the image
// size: box x 3 / levels, cls x classes / 80 x 3 / levels, obj x
// (image size / 640)^2 x 3 / levels.
LossOptions ScaledForModel(LossOptions options, int64_t levels, int64_t classes,
                           int64_t image_size);

struct LossResult {
  // (box + obj + cls) x batch size: what backward() takes (YOLOv5's).
  at::Tensor loss;
  // The three parts (already times their gains), detached, for logs.
  at::Tensor box, obj, cls;
};

// Computes the loss of `raw` (YoloV5::forward's three levels) against
// `targets` [n, 6] = (image index in the batch, class, cx, cy, w, h), the
// box normalised to the input's width and height. `detect` gives the
// anchors and strides. InvalidArgument for a targets tensor of another
// shape, or a class outside [0, classes).
absl::StatusOr<LossResult> ComputeLoss(const std::vector<at::Tensor>& raw,
                                       const at::Tensor& targets, const DetectImpl& detect,
                                       const LossOptions& options);

// What build_targets gives one level: the matched (image, anchor, grid y,
// grid x), the target box (x, y offsets in the cell, w, h in grid units),
// the anchor (grid units) and the class of each match.
struct LevelTargets {
  at::Tensor image, anchor, gy, gx;  // int64 [m]
  at::Tensor box;                    // [m, 4]
  at::Tensor anchors;                // [m, 2]
  at::Tensor cls;                    // int64 [m]
};

// YOLOv5's build_targets for every level (exposed for tests).
std::vector<LevelTargets> BuildTargets(const std::vector<at::Tensor>& raw,
                                       const at::Tensor& targets, const DetectImpl& detect,
                                       double anchor_t);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_LOSS_H_
