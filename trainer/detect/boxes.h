// Box operations of the detector, as pure functions over tensors: format
// conversion, IoU (pairwise, and element-wise with GIoU, DIoU and CIoU as
// YOLOv5's bbox_iou computes them for its loss), greedy NMS with
// torchvision.ops.nms's semantics, and YOLOv5's non_max_suppression over a
// batch of raw predictions.
//
// Boxes are the last dimension of a floating-point tensor: (x1, y1, x2, y2)
// corners ("xyxy") or (cx, cy, w, h) centre and size ("xywh"). Each function
// computes in the dtype and on the device of its inputs, with the
// operations of the reference it follows, so float32 results equal the
// Python reference's bit for bit. The greedy NMS loop runs on the CPU (the
// boxes are copied there); its result comes back on the input's device.
//
// Thread-safety: all functions are pure; any thread may call them.
#ifndef ELASTRUN_TRAINER_DETECT_BOXES_H_
#define ELASTRUN_TRAINER_DETECT_BOXES_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace elastrun::trainer::detect {

// YOLOv5's eps: keeps IoU's divisions finite for empty boxes.
inline constexpr double kIouEps = 1e-7;

// [..., 4] xywh -> [..., 4] xyxy (YOLOv5's xywh2xyxy).
// InvalidArgument unless `boxes` is floating point with a last dimension of 4.
absl::StatusOr<at::Tensor> XywhToXyxy(const at::Tensor& boxes);

// [..., 4] xyxy -> [..., 4] xywh (YOLOv5's xyxy2xywh). Errors as XywhToXyxy.
absl::StatusOr<at::Tensor> XyxyToXywh(const at::Tensor& boxes);

// The IoU of every box of `boxes1` [N, 4] with every box of `boxes2` [M, 4],
// both xyxy: [N, M], inter / (area1 + area2 - inter + eps). eps = kIouEps is
// YOLOv5's box_iou; eps = 0 is torchvision.ops.box_iou, bit for bit.
// InvalidArgument unless both are floating point [*, 4] and eps >= 0.
absl::StatusOr<at::Tensor> BoxIou(const at::Tensor& boxes1, const at::Tensor& boxes2,
                                  double eps = kIouEps);

enum class IouKind {
  kIou,   // intersection over union
  kGIou,  // generalized: IoU - (hull area - union) / hull area
  kDIou,  // distance: IoU - centre distance^2 / hull diagonal^2
  kCIou,  // complete: DIoU - alpha * v, v the aspect-ratio term
};

struct BboxIouOptions {
  // Which IoU.
  IouKind kind = IouKind::kIou;
  // Boxes are xywh (YOLOv5's loss passes xywh); false: xyxy.
  bool xywh = true;
  // YOLOv5's eps: added to the union, the hull area (GIoU) and the squared
  // hull diagonal (DIoU, CIoU), and the floor of the box heights when xyxy.
  double eps = kIouEps;
};

// YOLOv5's bbox_iou: the IoU of `box1` [..., 4] with `box2` [..., 4],
// element by element after broadcasting; the result has the broadcast shape
// without its last dimension. Differentiable; CIoU's alpha is a constant of
// the graph (computed without gradient), as in YOLOv5.
// torchvision's generalized_box_iou, distance_box_iou and complete_box_iou
// compute the same quantities pairwise; they differ only in where eps goes
// (torchvision: the squared diagonal only), so with eps = 0 on both sides
// the results agree to rounding.
// InvalidArgument unless both are floating point with a last dimension of 4
// that broadcast together, and eps >= 0.
absl::StatusOr<at::Tensor> BboxIou(const at::Tensor& box1, const at::Tensor& box2,
                                   const BboxIouOptions& options = {});

// Greedy non-maximum suppression, torchvision.ops.nms: boxes [N, 4] xyxy
// with scores [N]; visits the boxes by score, highest first, keeps each
// box not yet suppressed and suppresses every later box whose IoU with it
// is above `iou_threshold`. Returns the kept indices (int64 [K], in the
// order kept: by decreasing score) on the input's device. Equal scores
// are visited in index order (a stable sort, as torchvision's kernel
// sorts). float and double compute in their dtype; other floating dtypes
// in float.
// InvalidArgument unless boxes is floating point [N, 4], scores [N] without
// NaN, and iou_threshold is in [0, 1].
absl::StatusOr<at::Tensor> Nms(const at::Tensor& boxes, const at::Tensor& scores,
                               double iou_threshold);

// Nms within each category of `idxs` (integer [N]), torchvision's
// batched_nms by its coordinate trick: every box is shifted by
// idx * (max coordinate + 1), so boxes of different categories never
// overlap. (torchvision runs one Nms per category instead above 4000
// coordinates on the CPU; the kept sets then agree but for rounding at an
// IoU equal to the threshold.) Errors as Nms, and InvalidArgument unless
// idxs is integer [N].
absl::StatusOr<at::Tensor> BatchedNms(const at::Tensor& boxes, const at::Tensor& scores,
                                      const at::Tensor& idxs, double iou_threshold);

struct NmsOptions {
  // Keeps a box's class when objectness > conf_thres and
  // objectness * class probability > conf_thres. In [0, 1].
  double conf_thres = 0.25;
  // Nms's IoU threshold. In [0, 1].
  double iou_thres = 0.45;
  // Keeps only these classes (each in [0, nc)); empty: every class.
  std::vector<int64_t> classes;
  // One Nms over all classes; false: boxes of different classes never
  // suppress each other.
  bool agnostic = false;
  // Every class above conf_thres of a box is a detection of its own (used
  // for mAP); false: only its best class. Ignored when nc == 1.
  bool multi_label = false;
  // At most this many detections per image, the highest scores. >= 1.
  int64_t max_det = 300;
  // At most this many candidates (the highest scores) enter Nms. >= 1.
  int64_t max_nms = 30000;
  // The per-class offset of the boxes when not agnostic: larger than any
  // image side in pixels. > 0.
  double max_wh = 7680;
};

// YOLOv5's non_max_suppression: `prediction` [B, N, 5 + nc], each row a
// box (cx, cy, w, h), objectness and nc class probabilities. Returns per
// image a [n, 6] tensor (x1, y1, x2, y2, conf, cls) of prediction's dtype
// and device, by decreasing conf, n <= max_det. (YOLOv5's time limit,
// a-priori labels and mask columns are not part of it.)
// InvalidArgument unless prediction is floating point [B, N, 5 + nc] with
// nc >= 1 and the options are in their ranges.
absl::StatusOr<std::vector<at::Tensor>> NonMaxSuppression(const at::Tensor& prediction,
                                                          const NmsOptions& options = {});

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_BOXES_H_
