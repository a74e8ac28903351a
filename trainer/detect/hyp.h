// YOLOv5's hyperparameters (data/hyps/hyp.*.yaml): the learning-rate
// schedule, the optimizer, the loss gains and the augmentation
// probabilities of a detector run, read from a YOLOv5 hyp.yaml and the
// config's `hyp:` section, checked key by key, and written back into the
// run folder as a hyp.yaml that YOLOv5 reads too.
//
// Every key is either honoured or refused by name:
//   - iou_t is accepted and, as in YOLOv5 since v5.0, unused: the loss
//     matches targets to anchors by anchor_t (the width and height ratio),
//     not by IoU. It stays a key so that YOLOv5's files load unchanged.
//   - copy_paste > 0 is refused: it pastes instance segments, and these
//     datasets have boxes only.
//   - anchors (YOLOv5's optional key) is the number of anchors per output
//     layer; only 3, the model's, is supported, or 0 for "ignore the key".
//   - label_smoothing is train.py's --label-smoothing, here a hyp key
//     (YOLOv5 also stores it in its hyp dict).
#ifndef ELASTRUN_TRAINER_DETECT_HYP_H_
#define ELASTRUN_TRAINER_DETECT_HYP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/node.h"
#include "common/config/schema.h"

namespace elastrun::trainer::detect {

// The hyperparameters of a run, with hyp.scratch-low.yaml's values as
// defaults. Each key's meaning and accepted range is in HypSchema()'s docs
// and hyp.cc's table.
struct Hyp {
  double lr0 = 0.01;             // initial learning rate (SGD 1e-2, Adam 1e-3)
  double lrf = 0.01;             // final OneCycle/linear learning rate (lr0 * lrf)
  double momentum = 0.937;       // SGD momentum / Adam beta1
  double weight_decay = 0.0005;  // optimizer weight decay
  double warmup_epochs = 3.0;    // warmup epochs (fractions ok)
  double warmup_momentum = 0.8;  // warmup initial momentum
  double warmup_bias_lr = 0.1;   // warmup initial bias lr
  double box = 0.05;             // box loss gain
  double cls = 0.5;              // cls loss gain
  double cls_pw = 1.0;           // cls BCE positive weight
  double obj = 1.0;              // obj loss gain (scales with pixels)
  double obj_pw = 1.0;           // obj BCE positive weight
  double iou_t = 0.20;           // IoU training threshold: accepted, unused (see above)
  double anchor_t = 4.0;         // anchor-multiple threshold
  double fl_gamma = 0.0;         // focal loss gamma (0: plain BCE)
  double hsv_h = 0.015;          // HSV hue augmentation (fraction)
  double hsv_s = 0.7;            // HSV saturation augmentation (fraction)
  double hsv_v = 0.4;            // HSV value augmentation (fraction)
  double degrees = 0.0;          // rotation (+/- degrees)
  double translate = 0.1;        // translation (+/- fraction)
  double scale = 0.5;            // scale (+/- gain)
  double shear = 0.0;            // shear (+/- degrees)
  double perspective = 0.0;      // perspective (+/- fraction), 0 to 0.001
  double flipud = 0.0;           // flip up-down (probability)
  double fliplr = 0.5;           // flip left-right (probability)
  double mosaic = 1.0;           // mosaic (probability)
  double mixup = 0.0;            // mixup (probability)
  double copy_paste = 0.0;       // segment copy-paste (probability); only 0
  int anchors = 3;               // anchors per output layer; only 3 (0: ignore)
  double label_smoothing = 0.0;  // class label smoothing epsilon

  friend bool operator==(const Hyp& a, const Hyp& b);
  friend bool operator!=(const Hyp& a, const Hyp& b) { return !(a == b); }
};

// Every key above with its type, default (Hyp{}'s) and one-line doc, for
// --list-targets style listings and Schema::Apply's "unknown key" errors.
const config::Schema& HypSchema();

// The hyp of a run: the defaults, then the YOLOv5 hyp.yaml at `file` ("":
// none), then the keys of the config's `hyp:` section (nullptr or a null
// node: none); a later source wins key by key. The merged values are
// checked, each error naming where its value was written
// ("file:line:col: key: ..."; "hyp.key" for the section's keys):
//   NotFound / FailedPrecondition: `file` unreadable or too large;
//   InvalidArgument: YAML syntax, a top level or section that is not a
//     mapping, an unknown key (with "did you mean"), a value that is not a
//     number, not finite, or outside its range (negative gains,
//     probabilities outside [0, 1], lr0 or lrf <= 0, anchor_t <= 1, ...),
//     copy_paste > 0, anchors other than 3 or 0.
absl::StatusOr<Hyp> LoadHyp(const std::string& file, const config::Node* section);

// YOLOv5's hyperparameter-evolution metadata per key (train.py's `meta`):
// whether evolution mutates it, and its lower and upper limits. In
// YOLOv5's order; label_smoothing (not a YOLOv5 hyp key) has none.
struct HypBound {
  const char* key;
  bool mutate;
  double low, high;
};
const std::vector<HypBound>& HypBounds();

// `hyp` as a YOLOv5-style hyp.yaml (every key with its comment, in YOLOv5's
// order), for the run folder. LoadHyp reads it back to an equal Hyp (numbers
// are written in the shortest form that reads back exactly), and so does
// YOLOv5: every float has a '.', as PyYAML's YAML 1.1 needs; anchors = 3 is
// written commented out, as in YOLOv5's files, since YOLOv5 takes a set
// `anchors` key as "replace the model's anchors".
std::string HypToYaml(const Hyp& hyp);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_HYP_H_
