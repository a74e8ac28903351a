// Box ops against independent references on random inputs: torchvision's
// box_iou, generalized/distance/complete_box_iou, nms and batched_nms
// (python3-torchvision), and a Python transcription of YOLOv5's bbox_iou
// and non_max_suppression; plus edge cases and errors.
#include "trainer/detect/boxes.h"

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "trainer/detect/metrics_test_util.h"

namespace elastrun::trainer::detect {
namespace {

using ::elastrun::trainer::detect::testing::PyList;
using ::elastrun::trainer::detect::testing::RunPythonReference;

std::optional<std::vector<std::vector<double>>> RunTorchvision(
    const std::string& script) {
  return RunPythonReference("import torch, torchvision", script);
}

#define SKIP_WITHOUT_TORCHVISION(out)                                             \
  if (!(out))                                                                     \
  GTEST_SKIP() << "/usr/bin/python3 with torch and torchvision is not available " \
                  "(scripts/setup.sh installs python3-torchvision)"

std::vector<double> Values(const at::Tensor& t) {
  const at::Tensor flat = t.to(at::kDouble).contiguous().view(-1);
  return std::vector<double>(flat.data_ptr<double>(),
                             flat.data_ptr<double>() + flat.numel());
}

// A Python expression for `t` (float or double, any shape), exactly.
std::string Py(const at::Tensor& t) {
  return absl::StrCat("torch.tensor(", PyList(Values(t)), ", dtype=torch.",
                      t.scalar_type() == at::kFloat ? "float32" : "float64", ").reshape(",
                      absl::StrJoin(t.sizes(), ","), ")");
}

// n random xyxy boxes in [0, 100)^2, sides in [1, 40), a few repeated.
at::Tensor RandomBoxes(int64_t n, std::mt19937& rng, at::ScalarType dtype) {
  std::uniform_real_distribution<double> pos(0, 100), side(1, 40);
  at::Tensor b = at::empty({n, 4}, at::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    if (i > 2 && i % 7 == 0) {
      b[i] = b[i - 3];
      continue;
    }
    const double x = pos(rng), y = pos(rng);
    b[i] = at::tensor({x, y, x + side(rng), y + side(rng)}, at::kDouble);
  }
  return b.to(dtype);
}

at::Tensor Ok(absl::StatusOr<at::Tensor> t) {
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : at::Tensor();
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want,
                double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i;
  }
}

at::Tensor Pairwise(const at::Tensor& a, const at::Tensor& b, IouKind kind, double eps) {
  BboxIouOptions o;
  o.kind = kind;
  o.xywh = false;
  o.eps = eps;
  return Ok(BboxIou(a.unsqueeze(1), b.unsqueeze(0), o));
}

// ------------------------------------------------------------ vs torchvision

TEST(BoxIouVsTorchvisionTest, IouGiouDiouCiouOnRandomBoxes) {
  std::mt19937 rng(7);
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    const at::Tensor a = RandomBoxes(37, rng, dtype), b = RandomBoxes(29, rng, dtype);
    const std::string script =
        absl::StrCat("from torchvision.ops import *\na = ", Py(a), "\nb = ", Py(b),
                     "\nemit(f, box_iou(a, b), generalized_box_iou(a, b), "
                     "distance_box_iou(a, b, eps=0),\n"
                     "     complete_box_iou(a, b, eps=0), distance_box_iou(a, b), "
                     "complete_box_iou(a, b))\n");
    auto out = RunTorchvision(script);
    SKIP_WITHOUT_TORCHVISION(out);
    ASSERT_EQ(out->size(), 6u);
    // IoU and GIoU are the same operations: equal bit for bit.
    EXPECT_EQ(Values(Ok(BoxIou(a, b, /*eps=*/0))), (*out)[0]);
    EXPECT_EQ(Values(Pairwise(a, b, IouKind::kIou, 0)), (*out)[0]);
    EXPECT_EQ(Values(Pairwise(a, b, IouKind::kGIou, 0)), (*out)[1]);
    // DIoU and CIoU compute the centre distance in another order: equal to rounding.
    const double tol = dtype == at::kFloat ? 1e-6 : 1e-13;
    ExpectNear(Values(Pairwise(a, b, IouKind::kDIou, 0)), (*out)[2], tol, "DIoU eps=0");
    ExpectNear(Values(Pairwise(a, b, IouKind::kCIou, 0)), (*out)[3], tol, "CIoU eps=0");
    // With the default eps, YOLOv5's also enters the union: IoU changes by
    // at most eps / union (unions >= 1 here).
    ExpectNear(Values(Pairwise(a, b, IouKind::kDIou, kIouEps)), (*out)[4], 2e-7, "DIoU");
    ExpectNear(Values(Pairwise(a, b, IouKind::kCIou, kIouEps)), (*out)[5], 2e-7, "CIoU");
    // YOLOv5's box_iou: eps in the union.
    ExpectNear(Values(Ok(BoxIou(a, b))), (*out)[0], 2e-7, "box_iou with eps");
  }
}

// n scores from a few values (many ties) and boxes in clusters (many overlaps).
void RandomNmsInput(int64_t n, std::mt19937& rng, at::Tensor* boxes, at::Tensor* scores,
                    at::Tensor* idxs) {
  *boxes = RandomBoxes(n, rng, at::kFloat) * 0.5;
  std::uniform_int_distribution<int> level(0, 9), cls(0, 4);
  *scores = at::empty({n}, at::kFloat);
  *idxs = at::empty({n}, at::kLong);
  for (int64_t i = 0; i < n; ++i) {
    (*scores)[i] = level(rng) / 10.0f;
    (*idxs)[i] = cls(rng);
  }
}

TEST(NmsVsTorchvisionTest, KeepsTheSameIndicesWithTies) {
  std::mt19937 rng(11);
  std::string script = "from torchvision.ops import nms, batched_nms\n";
  struct Case {
    at::Tensor boxes, scores, idxs;
    double threshold;
  };
  std::vector<Case> cases;
  for (int64_t n : {1, 5, 90, 300, 900}) {
    for (double threshold : {0.0, 0.3, 0.5, 0.8}) {
      Case c;
      RandomNmsInput(n, rng, &c.boxes, &c.scores, &c.idxs);
      c.threshold = threshold;
      absl::StrAppend(&script, "b, s, i = ", Py(c.boxes), ", ", Py(c.scores), ", ",
                      Py(c.idxs.to(at::kDouble)), ".long()\nemit(f, nms(b, s, ",
                      threshold, "), batched_nms(b, s, i, ", threshold, "))\n");
      cases.push_back(std::move(c));
    }
  }
  auto out = RunTorchvision(script);
  SKIP_WITHOUT_TORCHVISION(out);
  ASSERT_EQ(out->size(), 2 * cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    SCOPED_TRACE(absl::StrCat("n=", c.boxes.size(0), " threshold=", c.threshold));
    EXPECT_EQ(Values(Ok(Nms(c.boxes, c.scores, c.threshold))), (*out)[2 * k]);
    EXPECT_EQ(Values(Ok(BatchedNms(c.boxes, c.scores, c.idxs, c.threshold))),
              (*out)[2 * k + 1]);
  }
}

// -------------------------------------------------- vs YOLOv5's transcription

// YOLOv5's bbox_iou (utils/metrics.py), transcribed.
const char kYoloBboxIou[] = R"(
def bbox_iou(box1, box2, xywh=True, GIoU=False, DIoU=False, CIoU=False, eps=1e-7):
  if xywh:
    (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
    w1_, h1_, w2_, h2_ = w1 / 2, h1 / 2, w2 / 2, h2 / 2
    b1_x1, b1_x2, b1_y1, b1_y2 = x1 - w1_, x1 + w1_, y1 - h1_, y1 + h1_
    b2_x1, b2_x2, b2_y1, b2_y2 = x2 - w2_, x2 + w2_, y2 - h2_, y2 + h2_
  else:
    b1_x1, b1_y1, b1_x2, b1_y2 = box1.chunk(4, -1)
    b2_x1, b2_y1, b2_x2, b2_y2 = box2.chunk(4, -1)
    w1, h1 = b1_x2 - b1_x1, (b1_y2 - b1_y1).clamp(eps)
    w2, h2 = b2_x2 - b2_x1, (b2_y2 - b2_y1).clamp(eps)
  inter = (b1_x2.minimum(b2_x2) - b1_x1.maximum(b2_x1)).clamp(0) * \
          (b1_y2.minimum(b2_y2) - b1_y1.maximum(b2_y1)).clamp(0)
  union = w1 * h1 + w2 * h2 - inter + eps
  iou = inter / union
  if CIoU or DIoU or GIoU:
    cw = b1_x2.maximum(b2_x2) - b1_x1.minimum(b2_x1)
    ch = b1_y2.maximum(b2_y2) - b1_y1.minimum(b2_y1)
    if CIoU or DIoU:
      c2 = cw ** 2 + ch ** 2 + eps
      rho2 = ((b2_x1 + b2_x2 - b1_x1 - b1_x2) ** 2 + (b2_y1 + b2_y2 - b1_y1 - b1_y2) ** 2) / 4
      if CIoU:
        v = (4 / math.pi ** 2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
        with torch.no_grad():
          alpha = v / (v - iou + (1 + eps))
        return iou - (rho2 / c2 + v * alpha)
      return iou - rho2 / c2
    c_area = cw * ch + eps
    return iou - (c_area - union) / c_area
  return iou
)";

TEST(BboxIouVsYolov5Test, ValuesAndGradientsOnRandomBoxes) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  const int64_t n = 64;
  // Boxes as the loss sees them: xywh in grid units, some far apart, some equal.
  at::Tensor p = at::empty({n, 4}, at::kDouble), t = at::empty({n, 4}, at::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = at::tensor({4 * u(rng), 4 * u(rng), 0.1 + 3 * u(rng), 0.1 + 3 * u(rng)},
                      at::kDouble);
    t[i] = i % 9 == 0
               ? p[i].clone()
               : at::tensor({4 * u(rng), 4 * u(rng), 0.1 + 3 * u(rng), 0.1 + 3 * u(rng)},
                            at::kDouble);
  }
  const std::vector<std::pair<IouKind, const char*>> kinds = {
      {IouKind::kIou, ""},
      {IouKind::kGIou, ", GIoU=True"},
      {IouKind::kDIou, ", DIoU=True"},
      {IouKind::kCIou, ", CIoU=True"}};
  std::string script = kYoloBboxIou;
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    for (bool xywh : {true, false}) {
      for (const auto& [kind, flag] : kinds) {
        absl::StrAppend(
            &script, "p, t = ", Py(p.to(dtype)), ".requires_grad_(), ", Py(t.to(dtype)),
            ".requires_grad_()\n", "v = bbox_iou(p, t, xywh=", xywh ? "True" : "False",
            flag, ")\n(v * torch.arange(v.numel()).reshape(v.shape)).sum().backward()\n",
            "emit(f, v.detach(), p.grad, t.grad)\n");
      }
    }
  }
  auto out = RunTorchvision(script);
  SKIP_WITHOUT_TORCHVISION(out);
  ASSERT_EQ(out->size(), 3u * 2 * 2 * kinds.size());
  size_t line = 0;
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    for (bool xywh : {true, false}) {
      for (const auto& [kind, flag] : kinds) {
        SCOPED_TRACE(absl::StrCat(c10::toString(dtype), " xywh=", xywh, flag));
        const at::Tensor pp = p.to(dtype).clone().requires_grad_();
        const at::Tensor tt = t.to(dtype).clone().requires_grad_();
        BboxIouOptions o;
        o.kind = kind;
        o.xywh = xywh;
        const at::Tensor v = Ok(BboxIou(pp, tt, o));
        ASSERT_EQ(v.sizes(), at::IntArrayRef({n}));
        (v * at::arange(n, v.options())).sum().backward();
        // The same operations in the same order: the same bits.
        EXPECT_EQ(Values(v.detach()), (*out)[line++]);
        const double tol =
            dtype == at::kFloat ? 1e-4 : 1e-12;  // backward may sum in another order
        ExpectNear(Values(pp.grad()), (*out)[line++], tol, "d/d box1");
        ExpectNear(Values(tt.grad()), (*out)[line++], tol, "d/d box2");
      }
    }
  }
}

// YOLOv5's non_max_suppression (utils/general.py) without its time limit,
// a-priori labels and masks, transcribed.
const char kYoloNms[] = R"(
def xywh2xyxy(x):
  y = x.clone()
  y[..., 0] = x[..., 0] - x[..., 2] / 2
  y[..., 1] = x[..., 1] - x[..., 3] / 2
  y[..., 2] = x[..., 0] + x[..., 2] / 2
  y[..., 3] = x[..., 1] + x[..., 3] / 2
  return y

def non_max_suppression(prediction, conf_thres=0.25, iou_thres=0.45, classes=None, agnostic=False,
                        multi_label=False, max_det=300):
  bs = prediction.shape[0]
  nc = prediction.shape[2] - 5
  xc = prediction[..., 4] > conf_thres
  max_wh, max_nms = 7680, 30000
  multi_label &= nc > 1
  output = [torch.zeros((0, 6), device=prediction.device)] * bs
  for xi, x in enumerate(prediction):
    x = x[xc[xi]]
    if not x.shape[0]:
      continue
    x[:, 5:] *= x[:, 4:5]
    box = xywh2xyxy(x[:, :4])
    if multi_label:
      i, j = (x[:, 5:] > conf_thres).nonzero(as_tuple=False).T
      x = torch.cat((box[i], x[i, 5 + j, None], j[:, None].float()), 1)
    else:
      conf, j = x[:, 5:].max(1, keepdim=True)
      x = torch.cat((box, conf, j.float()), 1)[conf.view(-1) > conf_thres]
    if classes is not None:
      x = x[(x[:, 5:6] == torch.tensor(classes, device=x.device)).any(1)]
    n = x.shape[0]
    if not n:
      continue
    x = x[x[:, 4].argsort(descending=True)[:max_nms]]
    c = x[:, 5:6] * (0 if agnostic else max_wh)
    boxes, scores = x[:, :4] + c, x[:, 4]
    i = torchvision.ops.nms(boxes, scores, iou_thres)
    i = i[:max_det]
    output[xi] = x[i]
  return output
)";

TEST(NonMaxSuppressionVsYolov5Test, SameDetectionsOnRandomPredictions) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0, 1);
  const int64_t batch = 3, n = 400, nc = 4;
  at::Tensor pred = at::empty({batch, n, 5 + nc}, at::kFloat);
  float* d = pred.data_ptr<float>();
  for (int64_t i = 0; i < batch * n; ++i, d += 5 + nc) {
    d[0] = 160 * u(rng), d[1] = 160 * u(rng), d[2] = 4 + 60 * u(rng),
    d[3] = 4 + 60 * u(rng);
    for (int k = 4; k < 5 + nc; ++k) d[k] = u(rng);
  }
  struct Case {
    NmsOptions o;
    std::string py;
  };
  std::vector<Case> cases(6);
  cases[1].o.multi_label = true, cases[1].py = "multi_label=True";
  cases[2].o.agnostic = true, cases[2].py = "agnostic=True";
  cases[3].o.classes = {1, 3}, cases[3].py = "classes=[1, 3]";
  cases[4].o.max_det = 7, cases[4].o.iou_thres = 0.6,
  cases[4].py = "max_det=7, iou_thres=0.6";
  cases[5].o.conf_thres = 0.001, cases[5].o.multi_label = true,
  cases[5].py = "conf_thres=0.001, multi_label=True";
  std::string script = absl::StrCat(kYoloNms, "pred = ", Py(pred), "\n");
  for (const Case& c : cases) {
    absl::StrAppend(&script, "for d in non_max_suppression(pred.clone(), ", c.py,
                    "):\n  emit(f, d)\n");
  }
  auto out = RunTorchvision(script);
  SKIP_WITHOUT_TORCHVISION(out);
  ASSERT_EQ(out->size(), cases.size() * batch);
  size_t line = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.py);
    absl::StatusOr<std::vector<at::Tensor>> got = NonMaxSuppression(pred, c.o);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), static_cast<size_t>(batch));
    int64_t total = 0;
    for (const at::Tensor& det : *got) {
      EXPECT_EQ(det.size(1), 6);
      EXPECT_LE(det.size(0), c.o.max_det);
      EXPECT_EQ(Values(det), (*out)[line++]);
      total += det.size(0);
    }
    EXPECT_GE(total, 3 * std::min<int64_t>(c.o.max_det, 20));  // not a vacuous comparison
  }
}

// ------------------------------------------------------------- plain tests

TEST(BoxesTest, ConversionsRoundTrip) {
  const at::Tensor xywh = at::tensor({10.0, 20.0, 4.0, 6.0}, at::kDouble).view({1, 4});
  const at::Tensor xyxy = Ok(XywhToXyxy(xywh));
  EXPECT_EQ(Values(xyxy), (std::vector<double>{8, 17, 12, 23}));
  EXPECT_TRUE(at::equal(Ok(XyxyToXywh(xyxy)), xywh));
  EXPECT_EQ(Ok(XywhToXyxy(at::zeros({2, 3, 4}))).sizes(), at::IntArrayRef({2, 3, 4}));
}

TEST(BoxesTest, KnownIous) {
  const at::Tensor a = at::tensor({0.0, 0.0, 2.0, 2.0}, at::kDouble).view({1, 4});
  const at::Tensor b =
      at::tensor({1.0, 1.0, 3.0, 3.0, 5.0, 5.0, 6.0, 6.0}, at::kDouble).view({2, 4});
  ExpectNear(Values(Ok(BoxIou(a, b))), {1.0 / 7, 0.0}, 1e-7, "IoU");
  // GIoU of the disjoint pair: 0 - (36 - 5) / 36.
  ExpectNear(Values(Pairwise(a, b, IouKind::kGIou, 0)), {1.0 / 7 - 2.0 / 9, -31.0 / 36},
             1e-12, "GIoU");
  // DIoU: centres (1,1), (2,2): distance^2 2 over the hull's diagonal^2 18.
  ExpectNear(Values(Pairwise(a, b.narrow(0, 0, 1), IouKind::kDIou, 0)),
             {1.0 / 7 - 2.0 / 18}, 1e-12, "DIoU");
  // CIoU of equal aspect ratios is DIoU.
  ExpectNear(Values(Pairwise(a, b.narrow(0, 0, 1), IouKind::kCIou, 0)),
             {1.0 / 7 - 2.0 / 18}, 1e-12, "CIoU");
}

TEST(BoxesTest, NmsKeepsTheBestOfEachOverlap) {
  const at::Tensor boxes = at::tensor({0.f, 0.f, 10.f, 10.f, 1.f, 1.f, 11.f, 11.f, 50.f,
                                       50.f, 60.f, 60.f, 0.f, 0.f, 10.f, 10.f})
                               .view({4, 4});
  const at::Tensor scores = at::tensor({0.5f, 0.9f, 0.3f, 0.5f});
  EXPECT_EQ(Values(Ok(Nms(boxes, scores, 0.5))), (std::vector<double>{1, 2}));
  // Above any IoU: nothing suppressed, all by score (equal scores in torch.sort's order).
  EXPECT_EQ(Ok(Nms(boxes, scores, 1.0)).size(0), 4);
  // Different categories never suppress each other.
  const at::Tensor idxs = at::tensor({0, 1, 0, 0}, at::kLong);
  EXPECT_EQ(Values(Ok(BatchedNms(boxes, scores, idxs, 0.5))),
            (std::vector<double>{1, 0, 2}));
  EXPECT_EQ(Ok(Nms(at::zeros({0, 4}), at::zeros({0}), 0.5)).size(0), 0);
  EXPECT_EQ(
      Ok(BatchedNms(at::zeros({0, 4}), at::zeros({0}), at::zeros({0}, at::kLong), 0.5))
          .size(0),
      0);
}

TEST(BoxesTest, AllEqualScoresKeepDisjointBoxes) {
  at::Tensor boxes = at::zeros({200, 4});
  for (int i = 0; i < 200; ++i)
    boxes[i] = at::tensor({20.f * i, 0.f, 20.f * i + 10, 10.f});
  const at::Tensor keep = Ok(Nms(boxes, at::full({200}, 0.5f), 0.1));
  EXPECT_EQ(std::get<0>(keep.sort()).equal(at::arange(200)), true);
}

TEST(BoxesTest, NonMaxSuppressionEdgeCases) {
  // Nothing above the objectness threshold: an empty [0, 6] per image.
  auto none = NonMaxSuppression(at::zeros({2, 10, 7}));
  ASSERT_TRUE(none.ok()) << none.status();
  ASSERT_EQ(none->size(), 2u);
  EXPECT_EQ((*none)[1].sizes(), at::IntArrayRef({0, 6}));
  // 50 disjoint confident boxes, max_det 10: the 10 best.
  at::Tensor pred = at::zeros({1, 50, 6});
  for (int i = 0; i < 50; ++i) {
    pred[0][i] = at::tensor({20.f * i + 5, 5.f, 10.f, 10.f, 0.5f + i / 100.f, 1.f});
  }
  NmsOptions o;
  o.max_det = 10;
  auto best = NonMaxSuppression(pred, o);
  ASSERT_TRUE(best.ok()) << best.status();
  ASSERT_EQ((*best)[0].size(0), 10);
  EXPECT_FLOAT_EQ((*best)[0][0][4].item<float>(), 0.99f);
  EXPECT_FLOAT_EQ((*best)[0][9][4].item<float>(), 0.90f);
  EXPECT_FLOAT_EQ((*best)[0][0][0].item<float>(), 20.f * 49);
}

TEST(BoxesTest, CudaTensorsGiveTheCpuResultOnTheirDevice) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(9);
  at::Tensor boxes, scores, idxs;
  RandomNmsInput(500, rng, &boxes, &scores, &idxs);
  const at::Tensor keep = Ok(BatchedNms(boxes.cuda(), scores.cuda(), idxs.cuda(), 0.5));
  EXPECT_TRUE(keep.is_cuda());
  EXPECT_TRUE(keep.cpu().equal(Ok(BatchedNms(boxes, scores, idxs, 0.5))));
  at::Tensor pred =
      at::rand({2, 300, 8}) * at::tensor({160.f, 160.f, 60.f, 60.f, 1.f, 1.f, 1.f, 1.f});
  auto cpu = NonMaxSuppression(pred), cuda = NonMaxSuppression(pred.cuda());
  ASSERT_TRUE(cpu.ok() && cuda.ok());
  for (size_t i = 0; i < cpu->size(); ++i) {
    EXPECT_TRUE((*cuda)[i].is_cuda());
    ASSERT_EQ((*cuda)[i].sizes(), (*cpu)[i].sizes());
    EXPECT_TRUE(at::allclose((*cuda)[i].cpu(), (*cpu)[i], 1e-6, 1e-5));
  }
}

TEST(BoxesTest, ErrorsNameTheArgument) {
  const at::Tensor good = at::zeros({3, 4});
  auto bad_shape = BoxIou(at::zeros({3, 5}), good);
  EXPECT_EQ(bad_shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_shape.status().message().find("boxes1"), std::string::npos);
  EXPECT_FALSE(BoxIou(at::zeros({3, 4}, at::kLong), good).ok());
  EXPECT_FALSE(BboxIou(at::zeros({3, 4}), at::zeros({2, 4})).ok());  // no broadcast
  EXPECT_TRUE(BboxIou(at::zeros({3, 1, 4}), at::zeros({2, 4})).ok());
  EXPECT_FALSE(Nms(good, at::zeros({2}), 0.5).ok());
  EXPECT_FALSE(Nms(good, at::zeros({3}), 1.5).ok());
  EXPECT_FALSE(Nms(good, at::full({3}, NAN), 0.5).ok());
  EXPECT_FALSE(BatchedNms(good, at::zeros({3}), at::zeros({3}), 0.5).ok());  // float idxs
  EXPECT_FALSE(NonMaxSuppression(at::zeros({2, 10, 5})).ok());               // no class
  NmsOptions o;
  o.conf_thres = -0.1;
  EXPECT_FALSE(NonMaxSuppression(at::zeros({1, 1, 6}), o).ok());
  o = NmsOptions();
  o.classes = {1};
  auto bad_class = NonMaxSuppression(at::zeros({1, 1, 6}), o);
  EXPECT_EQ(bad_class.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_class.status().message().find("class 1"), std::string::npos);
  o = NmsOptions();
  o.max_det = 0;
  EXPECT_FALSE(NonMaxSuppression(at::zeros({1, 1, 6}), o).ok());
}

}  // namespace
}  // namespace elastrun::trainer::detect
