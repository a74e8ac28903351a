// YOLOv5's loss against a Python transcription of utils/loss.py
// (ComputeLoss, build_targets, FocalLoss, smooth_BCE) and bbox_iou's CIoU,
// run by Debian's python3-torch on the same random predictions, anchors
// and targets: the loss, its three parts and its gradients agree.
#include "trainer/detect/loss.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::trainer::detect {
namespace {

using ::testing::HasSubstr;

constexpr char kReference[] = R"PY(
import math, sys, numpy, torch, torch.nn as nn
d = sys.argv[1]
def load(name):
    shape = [int(v) for v in open(f"{d}/{name}.shape").read().split()]
    return torch.from_numpy(numpy.fromfile(f"{d}/{name}", dtype=numpy.float64).reshape(shape))
hyp = dict(line.split() for line in open(f"{d}/hyp"))
hyp = {k: float(v) for k, v in hyp.items()}
def bbox_iou(box1, box2, eps=1e-7):
    (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
    w1_, h1_, w2_, h2_ = w1 / 2, h1 / 2, w2 / 2, h2 / 2
    b1_x1, b1_x2, b1_y1, b1_y2 = x1 - w1_, x1 + w1_, y1 - h1_, y1 + h1_
    b2_x1, b2_x2, b2_y1, b2_y2 = x2 - w2_, x2 + w2_, y2 - h2_, y2 + h2_
    inter = (torch.min(b1_x2, b2_x2) - torch.max(b1_x1, b2_x1)).clamp(0) * \
            (torch.min(b1_y2, b2_y2) - torch.max(b1_y1, b2_y1)).clamp(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    cw = torch.max(b1_x2, b2_x2) - torch.min(b1_x1, b2_x1)
    ch = torch.max(b1_y2, b2_y2) - torch.min(b1_y1, b2_y1)
    c2 = cw ** 2 + ch ** 2 + eps
    rho2 = ((b2_x1 + b2_x2 - b1_x1 - b1_x2) ** 2 + (b2_y1 + b2_y2 - b1_y1 - b1_y2) ** 2) / 4
    v = (4 / math.pi ** 2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / c2 + v * alpha)
class FocalLoss(nn.Module):
    def __init__(self, loss_fcn, gamma=1.5, alpha=0.25):
        super().__init__()
        self.loss_fcn, self.gamma, self.alpha = loss_fcn, gamma, alpha
        self.loss_fcn.reduction = "none"
    def forward(self, pred, true):
        loss = self.loss_fcn(pred, true)
        p = torch.sigmoid(pred)
        p_t = true * p + (1 - true) * (1 - p)
        a = true * self.alpha + (1 - true) * (1 - self.alpha)
        return (loss * a * (1.0 - p_t) ** self.gamma).mean()
nl = 3
anchors = load("anchors")  # [nl, na, 2] grid units
na, nc = anchors.shape[1], int(hyp["nc"])
p = [load(f"raw{i}").requires_grad_(True) for i in range(nl)]
targets = load("targets")
BCEcls = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([hyp["cls_pw"]], dtype=torch.float64))
BCEobj = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([hyp["obj_pw"]], dtype=torch.float64))
eps = hyp["label_smoothing"]
cp, cn = 1.0 - 0.5 * eps, 0.5 * eps
if hyp["fl_gamma"] > 0:
    BCEcls, BCEobj = FocalLoss(BCEcls, hyp["fl_gamma"]), FocalLoss(BCEobj, hyp["fl_gamma"])
balance = [4.0, 1.0, 0.4]
def build_targets(p, targets):
    nt = targets.shape[0]
    tcls, tbox, indices, anch = [], [], [], []
    gain = torch.ones(7, dtype=torch.float64)
    ai = torch.arange(na, dtype=torch.float64).view(na, 1).repeat(1, nt)
    targets = torch.cat((targets.repeat(na, 1, 1), ai[..., None]), 2)
    g = 0.5
    off = torch.tensor([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]], dtype=torch.float64) * g
    for i in range(nl):
        a_i, shape = anchors[i], p[i].shape
        gain[2:6] = torch.tensor(shape, dtype=torch.float64)[[3, 2, 3, 2]]
        t = targets * gain
        if nt:
            r = t[..., 4:6] / a_i[:, None]
            j = torch.max(r, 1 / r).max(2)[0] < hyp["anchor_t"]
            t = t[j]
            gxy = t[:, 2:4]
            gxi = gain[[2, 3]] - gxy
            j, k = ((gxy % 1 < g) & (gxy > 1)).T
            l, m = ((gxi % 1 < g) & (gxi > 1)).T
            j = torch.stack((torch.ones_like(j), j, k, l, m))
            t = t.repeat((5, 1, 1))[j]
            offsets = (torch.zeros_like(gxy)[None] + off[:, None])[j]
        else:
            t = targets[0]
            offsets = 0
        bc, gxy, gwh, a = t.chunk(4, 1)
        a, (b, c) = a.long().view(-1), bc.long().T
        gij = (gxy - offsets).long()
        gi, gj = gij.T
        indices.append((b, a, gj.clamp_(0, shape[2] - 1), gi.clamp_(0, shape[3] - 1)))
        tbox.append(torch.cat((gxy - gij, gwh), 1))
        anch.append(a_i[a])
        tcls.append(c)
    return tcls, tbox, indices, anch
lcls, lbox, lobj = [torch.zeros(1, dtype=torch.float64) for _ in range(3)]
tcls, tbox, indices, anch = build_targets(p, targets)
for i, pi in enumerate(p):
    b, a, gj, gi = indices[i]
    tobj = torch.zeros(pi.shape[:4], dtype=pi.dtype)
    n = b.shape[0]
    if n:
        pxy, pwh, _, pcls = pi[b, a, gj, gi].split((2, 2, 1, nc), 1)
        pxy = pxy.sigmoid() * 2 - 0.5
        pwh = (pwh.sigmoid() * 2) ** 2 * anch[i]
        pbox = torch.cat((pxy, pwh), 1)
        iou = bbox_iou(pbox, tbox[i]).squeeze()
        lbox += (1.0 - iou).mean()
        tobj[b, a, gj, gi] = iou.detach().clamp(0).type(tobj.dtype)
        if nc > 1:
            t = torch.full_like(pcls, cn)
            t[range(n), tcls[i]] = cp
            lcls += BCEcls(pcls, t)
    lobj += BCEobj(pi[..., 4], tobj) * balance[i]
lbox *= hyp["box"]; lobj *= hyp["obj"]; lcls *= hyp["cls"]
loss = (lbox + lobj + lcls) * p[0].shape[0]
loss.sum().backward()
with open(f"{d}/py_loss", "w") as f:
    f.write(" ".join(repr(float(v)) for v in (loss.item(), lbox.item(), lobj.item(), lcls.item())))
for i in range(nl):
    p[i].grad.numpy().astype("float64").tofile(f"{d}/py_grad{i}")
)PY";

bool HaveTorchPython() {
  return std::system("/usr/bin/python3 -c 'import torch, numpy' > /dev/null 2>&1") == 0;
}

void Write(const std::string& dir, const std::string& name, const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kDouble).contiguous();
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(static_cast<const char*>(c.data_ptr()),
             static_cast<std::streamsize>(c.numel() * sizeof(double)));
  std::ofstream shape(dir + "/" + name + ".shape");
  for (int64_t s : c.sizes()) shape << s << " ";
}

at::Tensor Read(const std::string& path, at::IntArrayRef shape) {
  at::Tensor t = at::empty(shape, at::kDouble);
  std::ifstream(path, std::ios::binary)
      .read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * 8));
  return t;
}

// Random raw predictions for a model of `nc` classes on a batch of 4
// 128 x 96 images, and random targets: boxes of 2 to 60 px, some near the
// borders and cell edges, a few per image.
struct Case {
  std::vector<at::Tensor> raw;
  at::Tensor targets;
};
Case RandomCase(YoloV5& model, int64_t nc, int64_t n_targets, uint64_t seed) {
  torch::manual_seed(seed);
  Case c;
  for (const at::Tensor& level : model->forward(at::rand({4, 3, 128, 96}))) {
    c.raw.push_back((at::randn(level.sizes()) * 2).to(at::kDouble).requires_grad_(true));
  }
  at::Tensor t = at::empty({n_targets, 6}, at::kDouble);
  t.select(1, 0).random_(0, 4);
  t.select(1, 1).random_(0, nc);
  t.select(1, 2).uniform_(0.0, 1.0);
  t.select(1, 3).uniform_(0.0, 1.0);
  t.select(1, 4).uniform_(2.0 / 96, 60.0 / 96);
  t.select(1, 5).uniform_(2.0 / 128, 60.0 / 128);
  c.targets = t;
  return c;
}

void CompareWithPython(const LossOptions& o, int64_t nc, int64_t n_targets, uint64_t seed) {
  YoloV5Options mo;
  mo.num_classes = nc;
  YoloV5 model(mo);
  Case c = RandomCase(model, nc, n_targets, seed);
  DetectImpl& detect = *model->detect();
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("yolov5_loss_" + std::to_string(::getpid()) + "_" +
                            std::to_string(seed)))
                              .string();
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < c.raw.size(); ++i) Write(dir, "raw" + std::to_string(i), c.raw[i]);
  Write(dir, "anchors", detect.anchors());
  Write(dir, "targets", c.targets);
  std::ofstream(dir + "/hyp") << "nc " << nc << "\nbox " << o.box << "\nobj " << o.obj
                              << "\ncls " << o.cls << "\ncls_pw " << o.cls_pw << "\nobj_pw "
                              << o.obj_pw << "\nanchor_t " << o.anchor_t << "\nfl_gamma "
                              << o.fl_gamma << "\nlabel_smoothing " << o.label_smoothing
                              << "\n";
  std::ofstream(dir + "/ref.py") << kReference;
  const int rc = std::system(
      ("/usr/bin/python3 " + dir + "/ref.py " + dir + " > " + dir + "/out 2>&1").c_str());
  std::ifstream out_file(dir + "/out");
  const std::string out((std::istreambuf_iterator<char>(out_file)), {});
  ASSERT_EQ(rc, 0) << out;
  double want[4];
  std::ifstream(dir + "/py_loss") >> want[0] >> want[1] >> want[2] >> want[3];

  absl::StatusOr<LossResult> r = ComputeLoss(c.raw, c.targets, detect, o);
  ASSERT_TRUE(r.ok()) << r.status();
  r->loss.backward();
  EXPECT_NEAR(r->loss.item<double>(), want[0], 1e-9 * std::abs(want[0]) + 1e-12);
  EXPECT_NEAR(r->box.item<double>(), want[1], 1e-9);
  EXPECT_NEAR(r->obj.item<double>(), want[2], 1e-9);
  EXPECT_NEAR(r->cls.item<double>(), want[3], 1e-9);
  for (size_t i = 0; i < c.raw.size(); ++i) {
    const at::Tensor g = Read(dir + "/py_grad" + std::to_string(i), c.raw[i].sizes());
    EXPECT_TRUE(at::allclose(c.raw[i].grad(), g, 1e-7, 1e-10))
        << "level " << i << ": max diff " << (c.raw[i].grad() - g).abs().max().item<double>();
  }
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

TEST(LossTest, EqualsYoloV5sLossAndGradients) {
  if (!HaveTorchPython()) GTEST_SKIP() << "/usr/bin/python3 with torch and numpy is not available";
  LossOptions o = ScaledForModel(LossOptions{}, 3, 5, 128);
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE(seed);
    CompareWithPython(o, 5, 12, seed);
  }
}

TEST(LossTest, FocalLossLabelSmoothingAndPositiveWeightsToo) {
  if (!HaveTorchPython()) GTEST_SKIP() << "/usr/bin/python3 with torch and numpy is not available";
  LossOptions o;
  o.fl_gamma = 1.5;
  o.label_smoothing = 0.1;
  o.cls_pw = 1.7;
  o.obj_pw = 0.8;
  o.anchor_t = 2.9;
  CompareWithPython(o, 4, 20, 7);
}

TEST(LossTest, NoTargetsAndOneClass) {
  if (!HaveTorchPython()) GTEST_SKIP() << "/usr/bin/python3 with torch and numpy is not available";
  CompareWithPython(LossOptions{}, 1, 6, 9);  // one class: no class loss
  CompareWithPython(LossOptions{}, 3, 0, 11);  // an empty batch: objectness only
}

TEST(LossTest, BadTargetsAreClearErrors) {
  YoloV5Options mo;
  mo.num_classes = 3;
  YoloV5 model(mo);
  Case c = RandomCase(model, 3, 4, 5);
  absl::StatusOr<LossResult> r =
      ComputeLoss(c.raw, at::zeros({4, 5}, at::kDouble), *model->detect(), LossOptions{});
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("[n, 6]"));
  c.targets.select(1, 1).fill_(3);
  r = ComputeLoss(c.raw, c.targets, *model->detect(), LossOptions{});
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("outside [0, 3)"));
}

TEST(LossTest, GainsScaleAsYoloV5sTrainPy) {
  const LossOptions o = ScaledForModel(LossOptions{}, 3, 10, 320);
  EXPECT_DOUBLE_EQ(o.box, 0.05);
  EXPECT_DOUBLE_EQ(o.cls, 0.5 * 10 / 80);
  EXPECT_DOUBLE_EQ(o.obj, 1.0 * 0.25);
}

}  // namespace
}  // namespace elastrun::trainer::detect
