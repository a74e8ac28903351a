#include "trainer/detect/boxes.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace elastrun::trainer::detect {
namespace {

std::string ShapeOf(const at::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

// `what` is a floating-point tensor whose last dimension is 4 (and, when
// dim > 0, of exactly that many dimensions).
absl::Status CheckBoxes(const at::Tensor& t, const char* what, int64_t dim = 0) {
  if (!t.defined() || !at::isFloatingType(t.scalar_type())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": want a floating-point tensor of boxes, got ",
                     t.defined() ? std::string(c10::toString(t.scalar_type())) : "none"));
  }
  if (t.dim() < 1 || t.size(-1) != 4 || (dim > 0 && t.dim() != dim)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": want boxes of shape ",
                                                   dim == 2 ? "[N, 4]" : "[..., 4]",
                                                   ", got ", ShapeOf(t)));
  }
  return absl::OkStatus();
}

absl::Status CheckUnit(double v, const char* what) {
  if (!(v >= 0 && v <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " = ", v, ": want a value in [0, 1]"));
  }
  return absl::OkStatus();
}

absl::Status CheckEps(double eps) {
  if (!(eps >= 0) || !std::isfinite(eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("eps = ", eps, ": want a finite eps >= 0"));
  }
  return absl::OkStatus();
}

// torchvision's CPU kernel, loop for loop: the same operations in the same
// dtype, and `ovr` compared with the threshold in double as there.
template <typename T>
std::vector<int64_t> GreedyNms(const at::Tensor& boxes, const at::Tensor& order,
                               double iou_threshold) {
  const int64_t n = boxes.size(0);
  const at::Tensor x1_t = boxes.select(1, 0).contiguous();
  const at::Tensor y1_t = boxes.select(1, 1).contiguous();
  const at::Tensor x2_t = boxes.select(1, 2).contiguous();
  const at::Tensor y2_t = boxes.select(1, 3).contiguous();
  const at::Tensor areas_t = (x2_t - x1_t) * (y2_t - y1_t);
  const T* x1 = x1_t.data_ptr<T>();
  const T* y1 = y1_t.data_ptr<T>();
  const T* x2 = x2_t.data_ptr<T>();
  const T* y2 = y2_t.data_ptr<T>();
  const T* areas = areas_t.data_ptr<T>();
  const int64_t* ord = order.data_ptr<int64_t>();
  std::vector<char> suppressed(n, 0);
  std::vector<int64_t> keep;
  for (int64_t a = 0; a < n; ++a) {
    const int64_t i = ord[a];
    if (suppressed[i]) continue;
    keep.push_back(i);
    for (int64_t b = a + 1; b < n; ++b) {
      const int64_t j = ord[b];
      if (suppressed[j]) continue;
      const T w =
          std::max(static_cast<T>(0), std::min(x2[i], x2[j]) - std::max(x1[i], x1[j]));
      const T h =
          std::max(static_cast<T>(0), std::min(y2[i], y2[j]) - std::max(y1[i], y1[j]));
      const T inter = w * h;
      const T ovr = inter / (areas[i] + areas[j] - inter);
      if (static_cast<double>(ovr) > iou_threshold) suppressed[j] = 1;
    }
  }
  return keep;
}

}  // namespace

absl::StatusOr<at::Tensor> XywhToXyxy(const at::Tensor& boxes) {
  RETURN_IF_ERROR(CheckBoxes(boxes, "XywhToXyxy"));
  const std::vector<at::Tensor> c = boxes.unbind(-1);  // cx, cy, w, h
  return at::stack({c[0] - c[2] / 2, c[1] - c[3] / 2, c[0] + c[2] / 2, c[1] + c[3] / 2},
                   -1);
}

absl::StatusOr<at::Tensor> XyxyToXywh(const at::Tensor& boxes) {
  RETURN_IF_ERROR(CheckBoxes(boxes, "XyxyToXywh"));
  const std::vector<at::Tensor> c = boxes.unbind(-1);  // x1, y1, x2, y2
  return at::stack({(c[0] + c[2]) / 2, (c[1] + c[3]) / 2, c[2] - c[0], c[3] - c[1]}, -1);
}

absl::StatusOr<at::Tensor> BoxIou(const at::Tensor& boxes1, const at::Tensor& boxes2,
                                  double eps) {
  RETURN_IF_ERROR(CheckBoxes(boxes1, "BoxIou boxes1", 2));
  RETURN_IF_ERROR(CheckBoxes(boxes2, "BoxIou boxes2", 2));
  RETURN_IF_ERROR(CheckEps(eps));
  const at::Tensor a = boxes1.unsqueeze(1), b = boxes2.unsqueeze(0);  // [N,1,4], [1,M,4]
  const at::Tensor a1 = a.narrow(2, 0, 2), a2 = a.narrow(2, 2, 2);
  const at::Tensor b1 = b.narrow(2, 0, 2), b2 = b.narrow(2, 2, 2);
  const at::Tensor inter = (at::min(a2, b2) - at::max(a1, b1)).clamp_min(0).prod(2);
  return inter / ((a2 - a1).prod(2) + (b2 - b1).prod(2) - inter + eps);
}

absl::StatusOr<at::Tensor> BboxIou(const at::Tensor& box1, const at::Tensor& box2,
                                   const BboxIouOptions& options) {
  RETURN_IF_ERROR(CheckBoxes(box1, "BboxIou box1"));
  RETURN_IF_ERROR(CheckBoxes(box2, "BboxIou box2"));
  RETURN_IF_ERROR(CheckEps(options.eps));
  for (int64_t k = 1; k <= std::max(box1.dim(), box2.dim()); ++k) {
    const int64_t m = k <= box1.dim() ? box1.size(-k) : 1,
                  n = k <= box2.dim() ? box2.size(-k) : 1;
    if (m != n && m != 1 && n != 1) {
      return absl::InvalidArgumentError(absl::StrCat("BboxIou: box1 ", ShapeOf(box1),
                                                     " and box2 ", ShapeOf(box2),
                                                     " do not broadcast together"));
    }
  }
  const double eps = options.eps;
  std::vector<at::Tensor> p = box1.chunk(4, -1), q = box2.chunk(4, -1);  // each [..., 1]
  at::Tensor b1_x1, b1_y1, b1_x2, b1_y2, b2_x1, b2_y1, b2_x2, b2_y2, w1, h1, w2, h2;
  if (options.xywh) {
    w1 = p[2], h1 = p[3], w2 = q[2], h2 = q[3];
    const at::Tensor w1_ = w1 / 2, h1_ = h1 / 2, w2_ = w2 / 2, h2_ = h2 / 2;
    b1_x1 = p[0] - w1_, b1_x2 = p[0] + w1_, b1_y1 = p[1] - h1_, b1_y2 = p[1] + h1_;
    b2_x1 = q[0] - w2_, b2_x2 = q[0] + w2_, b2_y1 = q[1] - h2_, b2_y2 = q[1] + h2_;
  } else {
    b1_x1 = p[0], b1_y1 = p[1], b1_x2 = p[2], b1_y2 = p[3];
    b2_x1 = q[0], b2_y1 = q[1], b2_x2 = q[2], b2_y2 = q[3];
    w1 = b1_x2 - b1_x1, h1 = (b1_y2 - b1_y1).clamp_min(eps);
    w2 = b2_x2 - b2_x1, h2 = (b2_y2 - b2_y1).clamp_min(eps);
  }
  const at::Tensor inter = (b1_x2.minimum(b2_x2) - b1_x1.maximum(b2_x1)).clamp_min(0) *
                           (b1_y2.minimum(b2_y2) - b1_y1.maximum(b2_y1)).clamp_min(0);
  const at::Tensor uni = w1 * h1 + w2 * h2 - inter + eps;
  const at::Tensor iou = inter / uni;
  if (options.kind == IouKind::kIou) return iou.squeeze(-1);
  const at::Tensor cw = b1_x2.maximum(b2_x2) - b1_x1.minimum(b2_x1);  // hull width
  const at::Tensor ch = b1_y2.maximum(b2_y2) - b1_y1.minimum(b2_y1);  // hull height
  if (options.kind == IouKind::kGIou) {
    const at::Tensor c_area = cw * ch + eps;
    return (iou - (c_area - uni) / c_area).squeeze(-1);
  }
  const at::Tensor c2 = cw.pow(2) + ch.pow(2) + eps;  // hull diagonal squared
  const at::Tensor rho2 =
      ((b2_x1 + b2_x2 - b1_x1 - b1_x2).pow(2) + (b2_y1 + b2_y2 - b1_y1 - b1_y2).pow(2)) /
      4;
  if (options.kind == IouKind::kDIou) return (iou - rho2 / c2).squeeze(-1);
  const at::Tensor v =
      (4 / (M_PI * M_PI)) * (at::atan(w2 / h2) - at::atan(w1 / h1)).pow(2);
  at::Tensor alpha;
  {
    at::NoGradGuard no_grad;
    alpha = v / (v - iou + (1 + eps));
  }
  return (iou - (rho2 / c2 + v * alpha)).squeeze(-1);
}

absl::StatusOr<at::Tensor> Nms(const at::Tensor& boxes, const at::Tensor& scores,
                               double iou_threshold) {
  RETURN_IF_ERROR(CheckBoxes(boxes, "Nms boxes", 2));
  RETURN_IF_ERROR(CheckUnit(iou_threshold, "Nms iou_threshold"));
  if (!scores.defined() || scores.dim() != 1 || scores.size(0) != boxes.size(0) ||
      !at::isFloatingType(scores.scalar_type())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Nms scores: want floating-point scores [", boxes.size(0),
        "] (one per box), got ", scores.defined() ? ShapeOf(scores) : "none"));
  }
  if (scores.isnan().any().item<bool>()) {
    return absl::InvalidArgumentError(
        "Nms scores: a score is NaN; want every score a number");
  }
  at::ScalarType dtype = boxes.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble) dtype = at::kFloat;
  const at::Tensor cpu_boxes = boxes.to(at::kCPU, dtype).contiguous();
  const at::Tensor order = std::get<1>(
      scores.to(at::kCPU, dtype).sort(/*stable=*/true, /*dim=*/0, /*descending=*/true));
  std::vector<int64_t> keep = dtype == at::kDouble
                                  ? GreedyNms<double>(cpu_boxes, order, iou_threshold)
                                  : GreedyNms<float>(cpu_boxes, order, iou_threshold);
  return at::tensor(keep, at::kLong).to(boxes.device());
}

absl::StatusOr<at::Tensor> BatchedNms(const at::Tensor& boxes, const at::Tensor& scores,
                                      const at::Tensor& idxs, double iou_threshold) {
  RETURN_IF_ERROR(CheckBoxes(boxes, "BatchedNms boxes", 2));
  if (!idxs.defined() || idxs.dim() != 1 || idxs.size(0) != boxes.size(0) ||
      !at::isIntegralType(idxs.scalar_type(), /*includeBool=*/false)) {
    return absl::InvalidArgumentError(
        absl::StrCat("BatchedNms idxs: want integer categories [", boxes.size(0),
                     "] (one per box), got ", idxs.defined() ? ShapeOf(idxs) : "none"));
  }
  if (boxes.size(0) == 0) return Nms(boxes, scores, iou_threshold);
  const at::Tensor max_coordinate = boxes.max();
  const at::Tensor offsets = idxs.to(boxes.options()) * (max_coordinate + 1);
  return Nms(boxes + offsets.unsqueeze(1), scores, iou_threshold);
}

absl::StatusOr<std::vector<at::Tensor>> NonMaxSuppression(const at::Tensor& prediction,
                                                          const NmsOptions& options) {
  if (!prediction.defined() || !at::isFloatingType(prediction.scalar_type()) ||
      prediction.dim() != 3 || prediction.size(2) < 6) {
    return absl::InvalidArgumentError(
        absl::StrCat("NonMaxSuppression prediction: want floating-point [batch, boxes, 5 "
                     "+ classes] with at "
                     "least one class, got ",
                     prediction.defined() ? ShapeOf(prediction) : "none"));
  }
  const int64_t nc = prediction.size(2) - 5;
  RETURN_IF_ERROR(CheckUnit(options.conf_thres, "conf_thres"));
  RETURN_IF_ERROR(CheckUnit(options.iou_thres, "iou_thres"));
  if (options.max_det < 1 || options.max_nms < 1 || !(options.max_wh > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NonMaxSuppression: max_det = ", options.max_det,
                     ", max_nms = ", options.max_nms, ", max_wh = ", options.max_wh,
                     ": want max_det >= 1, max_nms >= 1 and max_wh > 0"));
  }
  for (int64_t c : options.classes) {
    if (c < 0 || c >= nc) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NonMaxSuppression classes: class ", c, " is not one of the model's ", nc,
          " classes; want each in [0, ", nc, ")"));
    }
  }
  const bool multi_label = options.multi_label && nc > 1;
  const auto dtype = prediction.scalar_type();
  std::vector<at::Tensor> out;
  out.reserve(prediction.size(0));
  for (int64_t b = 0; b < prediction.size(0); ++b) {
    out.push_back(at::zeros({0, 6}, prediction.options()));
    at::Tensor x = prediction[b];
    x = x.index({x.select(1, 4) > options.conf_thres});  // objectness
    if (x.size(0) == 0) continue;
    const at::Tensor conf_all = x.narrow(1, 5, nc) * x.narrow(1, 4, 1);  // obj * cls
    ASSIGN_OR_RETURN(const at::Tensor box, XywhToXyxy(x.narrow(1, 0, 4)));
    at::Tensor det;
    if (multi_label) {
      const at::Tensor ij = (conf_all > options.conf_thres).nonzero();
      const at::Tensor i = ij.select(1, 0), j = ij.select(1, 1);
      det = at::cat({box.index_select(0, i), conf_all.index({i, j}).unsqueeze(1),
                     j.unsqueeze(1).to(dtype)},
                    1);
    } else {
      auto [conf, j] = conf_all.max(1, /*keepdim=*/true);
      det = at::cat({box, conf, j.to(dtype)}, 1)
                .index({conf.view(-1) > options.conf_thres});
    }
    if (!options.classes.empty()) {
      const at::Tensor wanted = at::tensor(options.classes, at::kLong).to(det.device());
      det = det.index({(det.narrow(1, 5, 1) == wanted).any(1)});
    }
    if (det.size(0) == 0) continue;
    // YOLOv5's argsort (not stable): equal confidences enter Nms in its order.
    const at::Tensor order = det.select(1, 4).argsort(0, /*descending=*/true);
    det =
        det.index_select(0, order.narrow(0, 0, std::min(options.max_nms, order.size(0))));
    const at::Tensor offset =
        det.narrow(1, 5, 1) * (options.agnostic ? 0 : options.max_wh);
    ASSIGN_OR_RETURN(const at::Tensor keep, Nms(det.narrow(1, 0, 4) + offset,
                                                det.select(1, 4), options.iou_thres));
    out.back() =
        det.index_select(0, keep.narrow(0, 0, std::min(options.max_det, keep.size(0))));
  }
  return out;
}

}  // namespace elastrun::trainer::detect
