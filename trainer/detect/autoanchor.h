// AutoAnchor: YOLOv5's check of how well the anchors fit a data set's
// boxes, and the k-means + genetic search for better ones when they fit
// badly (utils/autoanchor.py: check_anchors, kmean_anchors,
// check_anchor_order). Torch-free: box and anchor sizes are (w, h) pairs
// in pixels at the training image size.
//
// The fit of anchor a to a box b is x = min over w, h of min(r, 1/r),
// r = b / a: 1 when equal, 1/4 when one side is 4x off. The loss assigns a
// box to the anchors with x > 1/anchor_t, so:
//   BPR (best possible recall): the fraction of boxes some anchor fits;
//   aat (anchors above threshold): anchors that fit a box, mean over boxes.
//
// Every random draw comes from std::mt19937_64 seeded with the options'
// seed through this file's own distributions (no std::*_distribution, no
// libm transcendental): the same inputs and seed give the same anchors,
// bit for bit, on any IEEE-754 machine.
#ifndef ELASTRUN_TRAINER_DETECT_AUTOANCHOR_H_
#define ELASTRUN_TRAINER_DETECT_AUTOANCHOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace elastrun::trainer::detect {

// A width and height in pixels: a label box's or an anchor's.
struct BoxSize {
  double w = 0;
  double h = 0;
};

// How well a set of anchors fits a set of boxes (see the file comment).
struct AnchorFit {
  double bpr = 0;  // best possible recall, in [0, 1]
  double aat = 0;  // anchors above threshold per box, in [0, anchors]
};

struct AutoAnchorOptions {
  // hyp anchor_t: a box fits an anchor when no side is more than anchor_t
  // times off. > 1.
  double anchor_t = 4.0;
  // The training image size in pixels (the random k-means fallback draws
  // anchors up to it). > 0.
  int image_size = 640;
  // Generations of the genetic refinement after k-means. >= 0.
  int generations = 1000;
  // k-means runs from fresh seeds, the one of least distortion kept (what
  // scipy.cluster.vq.kmeans's iter=30 means). >= 1.
  int kmeans_restarts = 30;
  // Current anchors with a BPR at least this fit; below it new anchors are
  // computed. YOLOv5 keeps them above 0.98; 0.98 itself is kept here.
  double good_bpr = 0.98;
  // Seeds every random draw (the per-image scale, k-means, the mutations).
  uint64_t seed = 0;
};

// The sizes of one image's label boxes in pixels at the training size:
// normalized (w, h) x image_size / max(image_width, image_height) x the
// image's (width, height), as YOLOv5's letterboxed training sees them.
// InvalidArgument when a dimension or image_size is not positive.
absl::StatusOr<std::vector<BoxSize>> LabelSizesAtTrainingSize(
    absl::Span<const BoxSize> normalized, int image_width, int image_height,
    int image_size);

// BPR and aat of `anchors` on `boxes`, as YOLOv5's metric computes them
// (in double). InvalidArgument when boxes or anchors are empty, a box size
// is negative or not finite, an anchor side is not positive and finite, or
// anchor_t <= 1.
absl::StatusOr<AnchorFit> ComputeAnchorFit(absl::Span<const BoxSize> boxes,
                                           absl::Span<const BoxSize> anchors,
                                           double anchor_t);

// The anchors k-means and the genetic refinement found for `boxes`.
struct KMeansAnchors {
  std::vector<BoxSize> anchors;  // n of them, sorted by area, smallest first
  double fitness = 0;            // mean over kept boxes of best x where > 1/thr
  AnchorFit fit;                 // on all the boxes, tiny ones included
  // k-means could not give n clusters (fewer boxes than anchors, fewer
  // distinct sizes): the search started from random anchors instead.
  bool random_init = false;
  std::vector<std::string> warnings;  // YOLOv5's, one line each
};

// YOLOv5's kmean_anchors on `boxes` (pixels at the training size, without
// the check's random scale): drops boxes with neither side >= 2 px (warning
// how many have a side < 3 px), whitens the rest by their standard
// deviation, runs k-means (k-means++ seeds, Lloyd's iterations, the best of
// kmeans_restarts runs), then `generations` mutations of the anchors, each
// kept when its fitness is higher. InvalidArgument when n < 1, no box is
// given or none is left after the filter, a box size is negative or not
// finite, or an option is out of its range.
absl::StatusOr<KMeansAnchors> ComputeKMeansAnchors(absl::Span<const BoxSize> boxes, int n,
                                                   const AutoAnchorOptions& options);

// What CheckAnchors found and decided.
struct AutoAnchorResult {
  AnchorFit old_fit;  // the current anchors on the randomly scaled boxes
  // The computed anchors (empty when the current ones fit) and their fit on
  // the same scaled boxes.
  std::vector<BoxSize> new_anchors;
  AnchorFit new_fit;
  // True when the new anchors replaced the current ones: their BPR is
  // higher.
  bool replaced = false;
  // The anchors to train with, level-major as given: new_anchors when
  // replaced (then put in the strides' order), else the current ones.
  std::vector<BoxSize> anchors;
  bool reversed = false;              // CheckAnchorOrder reversed the levels
  std::vector<std::string> warnings;  // from the k-means, one line each
  // One line as YOLOv5 logs it: "AutoAnchor: 4.12 anchors/target, 0.972
  // Best Possible Recall (BPR). Anchors are a poor fit, attempting to
  // improve... new anchors: 10,13, ... BPR 0.998: replaced".
  std::string message;
};

// YOLOv5's check_anchors. `images` holds each training image's label sizes
// in pixels at the training size (LabelSizesAtTrainingSize); each image's
// are scaled by a random factor in [0.9, 1.1) as augmentation would. When
// the current `anchors` (level-major: strides.size() levels of equal
// count) reach good_bpr they are kept; otherwise ComputeKMeansAnchors runs
// on the unscaled boxes, and its anchors replace the current ones only with
// a higher BPR. InvalidArgument for what ComputeKMeansAnchors and
// CheckAnchorOrder reject, and when no image has a label.
absl::StatusOr<AutoAnchorResult> CheckAnchors(
    absl::Span<const std::vector<BoxSize>> images, absl::Span<const BoxSize> anchors,
    absl::Span<const double> strides, const AutoAnchorOptions& options);

// YOLOv5's check_anchor_order: the levels' mean anchor areas must grow as
// their strides do; when the first and last levels say otherwise the levels
// are reversed in place (each level's anchors keep their order). Returns
// whether it reversed them. InvalidArgument when strides is empty or
// anchors are not strides.size() levels of equal, non-zero count.
absl::StatusOr<bool> CheckAnchorOrder(std::vector<BoxSize>& anchors,
                                      absl::Span<const double> strides);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_AUTOANCHOR_H_
