#include "trainer/detect/loss.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainer/detect/boxes.h"

namespace elastrun::trainer::detect {
namespace {

namespace F = torch::nn::functional;
using at::indexing::Slice;

// BCE with logits, mean, with a positive weight; focal (YOLOv5's
// FocalLoss, alpha 0.25) when gamma > 0.
at::Tensor Bce(const at::Tensor& pred, const at::Tensor& truth, double pos_weight,
               double gamma) {
  const at::Tensor pw = at::full({1}, pos_weight, pred.options());
  if (gamma <= 0) {
    return F::binary_cross_entropy_with_logits(
        pred, truth, F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pw));
  }
  constexpr double kAlpha = 0.25;
  at::Tensor loss = F::binary_cross_entropy_with_logits(
      pred, truth,
      F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pw).reduction(torch::kNone));
  const at::Tensor p = pred.sigmoid();
  const at::Tensor p_t = truth * p + (1 - truth) * (1 - p);
  const at::Tensor alpha = truth * kAlpha + (1 - truth) * (1 - kAlpha);
  return (loss * alpha * (1.0 - p_t).pow(gamma)).mean();
}

}  // namespace

LossOptions ScaledForModel(LossOptions o, int64_t levels, int64_t classes, int64_t image_size) {
  const double l = 3.0 / static_cast<double>(levels);
  o.box *= l;
  o.cls *= static_cast<double>(classes) / 80.0 * l;
  o.obj *= std::pow(static_cast<double>(image_size) / 640.0, 2) * l;
  return o;
}

std::vector<LevelTargets> BuildTargets(const std::vector<at::Tensor>& raw,
                                       const at::Tensor& targets, const DetectImpl& detect,
                                       double anchor_t) {
  torch::NoGradGuard no_grad;
  const auto opts = targets.options();
  const int64_t na = detect.num_anchors();
  const int64_t nt = targets.size(0);
  // Every target once per anchor, with the anchor's index appended:
  // [na, nt, 7] = (image, class, x, y, w, h, anchor).
  const at::Tensor ai = at::arange(na, opts).view({na, 1}).repeat({1, nt});
  const at::Tensor all = at::cat({targets.repeat({na, 1, 1}), ai.unsqueeze(2)}, 2);
  constexpr double g = 0.5;
  // The target's cell and its four neighbours, as offsets of half a cell.
  const at::Tensor off =
      at::tensor({0.0, 0.0, 1.0, 0.0, 0.0, 1.0, -1.0, 0.0, 0.0, -1.0}, opts).view({5, 2}) * g;
  std::vector<LevelTargets> out;
  for (size_t i = 0; i < raw.size(); ++i) {
    const int64_t ny = raw[i].size(2), nx = raw[i].size(3);
    const at::Tensor anchors = detect.anchors()[static_cast<int64_t>(i)].to(opts);
    at::Tensor gain = at::ones({7}, opts);
    gain.index_put_({Slice(2, 6)}, at::tensor({static_cast<double>(nx), static_cast<double>(ny),
                                               static_cast<double>(nx), static_cast<double>(ny)},
                                              opts));
    at::Tensor t = all * gain;
    at::Tensor offsets = at::zeros({1, 2}, opts);  // No targets: nothing to shift.
    if (nt > 0) {
      // Anchors whose width and height ratios to the target stay under
      // anchor_t.
      const at::Tensor r = t.index({"...", Slice(4, 6)}) / anchors.unsqueeze(1);
      const at::Tensor keep = std::get<0>(at::max(r, 1 / r).max(2)) < anchor_t;
      t = t.index({keep});
      // Besides its own cell, the two neighbours nearest the centre.
      const at::Tensor gxy = t.index({Slice(), Slice(2, 4)});
      const at::Tensor gxi = gain.index({Slice(2, 4)}) - gxy;
      const at::Tensor near_low = ((at::remainder(gxy, 1.0) < g) & (gxy > 1.0)).t();
      const at::Tensor near_high = ((at::remainder(gxi, 1.0) < g) & (gxi > 1.0)).t();
      const at::Tensor select = at::stack({at::ones_like(near_low[0]), near_low[0], near_low[1],
                                           near_high[0], near_high[1]});
      t = t.repeat({5, 1, 1}).index({select});
      offsets = (at::zeros_like(gxy).unsqueeze(0) + off.unsqueeze(1)).index({select});
    } else {
      t = all[0];
    }
    const at::Tensor gxy = t.index({Slice(), Slice(2, 4)});
    at::Tensor gij = (gxy - offsets).to(at::kLong);
    gij.select(1, 0).clamp_(0, nx - 1);
    gij.select(1, 1).clamp_(0, ny - 1);
    LevelTargets level;
    level.image = t.select(1, 0).to(at::kLong);
    level.cls = t.select(1, 1).to(at::kLong);
    level.anchor = t.select(1, 6).to(at::kLong);
    level.gx = gij.select(1, 0);
    level.gy = gij.select(1, 1);
    level.box = at::cat({gxy - gij.to(gxy.scalar_type()), t.index({Slice(), Slice(4, 6)})}, 1);
    level.anchors = anchors.index({level.anchor});
    out.push_back(std::move(level));
  }
  return out;
}

absl::StatusOr<LossResult> ComputeLoss(const std::vector<at::Tensor>& raw,
                                       const at::Tensor& targets, const DetectImpl& detect,
                                       const LossOptions& o) {
  const int64_t nc = detect.num_classes();
  if (targets.dim() != 2 || targets.size(1) != 6) {
    return absl::InvalidArgumentError(
        absl::StrCat("targets must be [n, 6] (image, class, x, y, w, h), got [",
                     absl::StrJoin(targets.sizes(), ","), "]"));
  }
  if (raw.size() != static_cast<size_t>(detect.num_levels()) ||
      o.balance.size() < raw.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the loss needs ", detect.num_levels(),
                                                   " levels of predictions and balances"));
  }
  if (targets.size(0) > 0) {
    const at::Tensor cls = targets.select(1, 1);
    if ((cls < 0).any().item<bool>() || (cls >= nc).any().item<bool>()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a target's class is outside [0, ", nc, "): ", cls.max().item<double>()));
    }
  }
  const auto opts = raw[0].options();
  const at::Tensor t = targets.to(opts);
  // Label smoothing: positive and negative class targets.
  const double cp = 1.0 - 0.5 * o.label_smoothing, cn = 0.5 * o.label_smoothing;
  at::Tensor lbox = at::zeros({1}, opts), lobj = at::zeros({1}, opts),
             lcls = at::zeros({1}, opts);
  const std::vector<LevelTargets> levels = BuildTargets(raw, t, detect, o.anchor_t);
  for (size_t i = 0; i < raw.size(); ++i) {
    const at::Tensor& pi = raw[i];
    const LevelTargets& lt = levels[i];
    at::Tensor tobj = at::zeros({pi.size(0), pi.size(1), pi.size(2), pi.size(3)}, opts);
    const int64_t n = lt.image.size(0);
    if (n > 0) {
      const at::Tensor ps = pi.index({lt.image, lt.anchor, lt.gy, lt.gx});
      const at::Tensor pxy = ps.index({Slice(), Slice(0, 2)}).sigmoid() * 2 - 0.5;
      const at::Tensor pwh =
          (ps.index({Slice(), Slice(2, 4)}).sigmoid() * 2).pow(2) * lt.anchors;
      BboxIouOptions ciou;
      ciou.kind = IouKind::kCIou;
      absl::StatusOr<at::Tensor> iou_or = BboxIou(at::cat({pxy, pwh}, 1), lt.box, ciou);
      if (!iou_or.ok()) return iou_or.status();
      const at::Tensor iou = iou_or->view({-1});
      lbox = lbox + (1.0 - iou).mean();
      // Objectness targets: the IoU (gr = 1).
      tobj.index_put_({lt.image, lt.anchor, lt.gy, lt.gx},
                      iou.detach().clamp(0).to(tobj.scalar_type()));
      if (nc > 1) {
        const at::Tensor pcls = ps.index({Slice(), Slice(5, 5 + nc)});
        at::Tensor truth = at::full_like(pcls, cn);
        truth.index_put_({at::arange(n, lt.cls.options()), lt.cls}, cp);
        lcls = lcls + Bce(pcls, truth, o.cls_pw, o.fl_gamma);
      }
    }
    lobj = lobj + Bce(pi.select(4, 4), tobj, o.obj_pw, o.fl_gamma) * o.balance[i];
  }
  lbox = lbox * o.box;
  lobj = lobj * o.obj;
  lcls = lcls * o.cls;
  const double bs = static_cast<double>(raw[0].size(0));
  LossResult r;
  r.loss = (lbox + lobj + lcls).sum() * bs;
  r.box = lbox.detach();
  r.obj = lobj.detach();
  r.cls = lcls.detach();
  return r;
}

}  // namespace elastrun::trainer::detect
