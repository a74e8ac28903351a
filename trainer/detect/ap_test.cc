// The metrics against a Python transcription of YOLOv5's process_batch,
// compute_ap and ap_per_class (numpy) on random predictions and labels,
// the accumulator split over ranks, and edge cases.
#include "trainer/detect/ap.h"

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trainer/detect/metrics_test_util.h"

namespace elastrun::trainer::detect {
namespace {

using ::elastrun::trainer::detect::testing::PyList;
using ::elastrun::trainer::detect::testing::RunPythonReference;

// YOLOv5's metrics, transcribed (utils/metrics.py, val.py's process_batch
// over a given IoU matrix). The one change: stable sorts, where YOLOv5's
// np.argsort leaves the order of equal confidences (and IoUs) to numpy.
const char kYoloMetrics[] = R"(
IOUV = np.linspace(0.5, 0.95, 10).astype(np.float32).astype(np.float64)

def process_batch(iou, lcls, pcls):
  correct = np.zeros((len(pcls), 10), dtype=bool)
  same_class = lcls[:, None] == pcls[None, :]
  for t in range(10):
    x = np.nonzero((iou >= IOUV[t]) & same_class)
    if x[0].shape[0]:
      matches = np.concatenate((np.stack(x, 1), iou[x[0], x[1]][:, None]), 1)
      if x[0].shape[0] > 1:
        matches = matches[matches[:, 2].argsort(kind='stable')[::-1]]
        matches = matches[np.unique(matches[:, 1], return_index=True)[1]]
        matches = matches[np.unique(matches[:, 0], return_index=True)[1]]
      correct[matches[:, 1].astype(int), t] = True
  return correct

def compute_ap(recall, precision, method='interp'):
  mrec = np.concatenate(([0.0], recall, [1.0]))
  mpre = np.concatenate(([1.0], precision, [0.0]))
  mpre = np.flip(np.maximum.accumulate(np.flip(mpre)))
  if method == 'interp':
    x = np.linspace(0, 1, 101)
    ap = np.trapz(np.interp(x, mrec, mpre), x)
  else:
    i = np.where(mrec[1:] != mrec[:-1])[0]
    ap = np.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1])
  return ap, mpre, mrec

def smooth(y, f=0.05):
  nf = round(len(y) * f * 2) // 2 + 1
  p = np.ones(nf // 2)
  yp = np.concatenate((p * y[0], y, p * y[-1]), 0)
  return np.convolve(yp, np.ones(nf) / nf, mode='valid')

def ap_per_class(tp, conf, pred_cls, target_cls, eps=1e-16):
  i = np.argsort(-conf, kind='stable')
  tp, conf, pred_cls = tp[i], conf[i], pred_cls[i]
  unique_classes, nt = np.unique(target_cls, return_counts=True)
  nc = unique_classes.shape[0]
  px = np.linspace(0, 1, 1000)
  ap, p, r, py = np.zeros((nc, tp.shape[1])), np.zeros((nc, 1000)), np.zeros((nc, 1000)), np.zeros((nc, 1000))
  for ci, c in enumerate(unique_classes):
    i = pred_cls == c
    n_l, n_p = nt[ci], i.sum()
    if n_p == 0 or n_l == 0:
      continue
    fpc = (1 - tp[i]).cumsum(0)
    tpc = tp[i].cumsum(0)
    recall = tpc / (n_l + eps)
    r[ci] = np.interp(-px, -conf[i], recall[:, 0], left=0)
    precision = tpc / (tpc + fpc)
    p[ci] = np.interp(-px, -conf[i], precision[:, 0], left=1)
    for j in range(tp.shape[1]):
      ap[ci, j], mpre, mrec = compute_ap(recall[:, j], precision[:, j])
      if j == 0:
        py[ci] = np.interp(px, mrec, mpre)
  f1 = 2 * p * r / (p + r + eps)
  i = smooth(f1.mean(0), 0.1).argmax()
  tpi = (r[:, i] * nt).round()
  fpi = (tpi / (p[:, i] + eps) - tpi).round()
  return dict(i=i, px=px, classes=unique_classes, nt=nt, p=p, r=r, f1=f1, py=py, ap=ap, tp=tpi, fp=fpi)

def emit_ap_per_class(f, res):
  emit(f, np.array([len(res['classes']), res['px'][res['i']]]))
  i = res['i']
  for ci, c in enumerate(res['classes']):
    emit(f, np.concatenate(([c, res['nt'][ci], res['p'][ci, i], res['r'][ci, i], res['f1'][ci, i],
                             res['tp'][ci], res['fp'][ci]], res['ap'][ci])))
    emit(f, res['p'][ci], res['r'][ci], res['f1'][ci], res['py'][ci])

def summarize(images):
  stats = [(process_batch(iou, lcls, pcls), conf, pcls, lcls) for iou, lcls, pcls, conf in images]
  tp, conf, pcls, lcls = [np.concatenate(x, 0) for x in zip(*stats)]
  if not tp.any():
    return np.zeros(4)
  res = ap_per_class(tp, conf, pcls, lcls)
  i = res['i']
  return np.array([res['p'][:, i].mean(), res['r'][:, i].mean(), res['ap'][:, 0].mean(),
                   res['ap'].mean(1).mean()])
)";

std::optional<std::vector<std::vector<double>>> RunNumpy(const std::string& script) {
  return RunPythonReference(std::string("import numpy as np\n") + kYoloMetrics, script);
}

#define SKIP_WITHOUT_NUMPY(out) \
  if (!(out)) GTEST_SKIP() << "/usr/bin/python3 with numpy is not available"

template <typename T>
std::string PyArray(const std::vector<T>& v, const char* dtype) {
  return absl::StrCat("np.array(", PyList(std::vector<double>(v.begin(), v.end())),
                      ", dtype=np.", dtype, ")");
}

std::string PyCorrect(const std::vector<Correct>& tp) {
  std::vector<double> flat;
  for (const Correct& c : tp) flat.insert(flat.end(), c.begin(), c.end());
  return absl::StrCat(PyArray(flat, "float64"), ".astype(bool).reshape(", tp.size(),
                      ", 10)");
}

void ExpectNear(absl::Span<const double> got, absl::Span<const double> want, double tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i;
}

// One image of a random evaluation: labels of classes 0-4, predictions of
// classes 0-3 and 5 (class 4 has labels but no predictions, class 5
// predictions but no labels), confidences on a 0.01 grid (ties), IoUs
// that now and then equal a threshold exactly.
struct RandomImage {
  int64_t id = 0;
  std::vector<double> iou, conf;
  std::vector<int64_t> lcls, pcls;
};

RandomImage MakeImage(int64_t id, std::mt19937& rng) {
  std::uniform_int_distribution<int> nl(0, 6), np(0, 12), lc(0, 4), pc(0, 4), pick(0, 9);
  std::uniform_real_distribution<double> u(0, 1);
  RandomImage im;
  im.id = id;
  for (int l = nl(rng); l > 0; --l) im.lcls.push_back(lc(rng));
  for (int p = np(rng); p > 0; --p) {
    const int c = pc(rng);
    im.pcls.push_back(c == 4 ? 5 : c);
    im.conf.push_back(std::round(100 * u(rng) + 0.5) / 100);
  }
  for (size_t k = 0; k < im.lcls.size() * im.pcls.size(); ++k) {
    const int r = pick(rng);
    im.iou.push_back(r == 0  ? IouThresholds()[pick(rng)]
                     : r < 6 ? 0.4 + 0.6 * u(rng)
                             : 0.4 * u(rng));
  }
  return im;
}

std::string PyImage(const RandomImage& im) {
  return absl::StrCat("(", PyArray(im.iou, "float64"), ".reshape(", im.lcls.size(), ", ",
                      im.pcls.size(), "), ", PyArray(im.lcls, "int64"), ", ",
                      PyArray(im.pcls, "int64"), ", ", PyArray(im.conf, "float64"), ")");
}

// --------------------------------------------------------- vs the reference

TEST(MatchPredictionsVsYolov5Test, SameCorrectMatrixOnRandomImages) {
  std::mt19937 rng(1);
  std::vector<RandomImage> images;
  std::string script;
  for (int k = 0; k < 60; ++k) {
    images.push_back(MakeImage(k, rng));
    absl::StrAppend(&script, "iou, lcls, pcls, conf = ", PyImage(images.back()),
                    "\nemit(f, process_batch(iou, lcls, pcls))\n");
  }
  auto out = RunNumpy(script);
  SKIP_WITHOUT_NUMPY(out);
  ASSERT_EQ(out->size(), images.size());
  for (size_t k = 0; k < images.size(); ++k) {
    auto correct = MatchPredictions(images[k].iou, images[k].lcls, images[k].pcls);
    ASSERT_TRUE(correct.ok()) << correct.status();
    std::vector<double> flat;
    for (const Correct& c : *correct) flat.insert(flat.end(), c.begin(), c.end());
    EXPECT_EQ(flat, (*out)[k]) << "image " << k;
  }
}

TEST(ComputeApVsYolov5Test, BothMethodsOnRandomCurves) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::pair<std::vector<double>, std::vector<double>>> curves;
  std::string script;
  for (int k = 0; k < 40; ++k) {
    std::vector<double> recall, precision;
    double r = 0;
    for (int n = k % 13; n > 0; --n) {
      if (u(rng) < 0.6) r = std::min(1.0, r + 0.2 * u(rng));
      recall.push_back(r);
      precision.push_back(u(rng) < 0.2 ? precision.empty() ? 1.0 : precision.back()
                                       : u(rng));
    }
    absl::StrAppend(&script, "r, p = np.array(", PyList(recall), "), np.array(",
                    PyList(precision),
                    ")\nemit(f, np.array([compute_ap(r, p)[0], compute_ap(r, p, "
                    "'continuous')[0]]))\n",
                    "emit(f, *compute_ap(r, p)[1:])\n");
    curves.emplace_back(recall, precision);
  }
  auto out = RunNumpy(script);
  SKIP_WITHOUT_NUMPY(out);
  ASSERT_EQ(out->size(), 3 * curves.size());
  for (size_t k = 0; k < curves.size(); ++k) {
    auto interp = ComputeAp(curves[k].first, curves[k].second);
    auto continuous = ComputeAp(curves[k].first, curves[k].second, ApMethod::kContinuous);
    ASSERT_TRUE(interp.ok() && continuous.ok());
    ExpectNear({interp->ap, continuous->ap}, (*out)[3 * k], 1e-12,
               absl::StrCat("AP ", k));
    EXPECT_EQ(interp->precision, (*out)[3 * k + 1]);
    EXPECT_EQ(interp->recall, (*out)[3 * k + 2]);
  }
}

// Our ApPerClass against the reference's output for the same predictions.
void ExpectApPerClassEqual(const ApPerClassResult& got,
                           const std::vector<std::vector<double>>& out, size_t& line) {
  ASSERT_GT(out.size(), line);
  ASSERT_EQ(out[line].size(), 2u);
  ASSERT_EQ(got.classes.size(), static_cast<size_t>(out[line][0]));
  EXPECT_EQ(got.confidence, out[line][1]);
  ++line;
  for (const ClassAp& c : got.classes) {
    SCOPED_TRACE(absl::StrCat("class ", c.cls));
    std::vector<double> row = {static_cast<double>(c.cls),
                               static_cast<double>(c.num_labels),
                               c.precision,
                               c.recall,
                               c.f1,
                               c.tp,
                               c.fp};
    row.insert(row.end(), c.ap.begin(), c.ap.end());
    ExpectNear(row, out[line++], 1e-9, "cls, labels, P, R, F1, tp, fp, AP");
    ExpectNear(c.precision_curve, out[line++], 1e-12, "P curve");
    ExpectNear(c.recall_curve, out[line++], 1e-12, "R curve");
    ExpectNear(c.f1_curve, out[line++], 1e-12, "F1 curve");
    ExpectNear(c.pr_curve, out[line++], 1e-12, "PR curve");
  }
}

TEST(ApPerClassVsYolov5Test, RandomPredictionsWithTiedConfidences) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> cls(0, 5);
  struct Case {
    std::vector<Correct> tp;
    std::vector<double> conf;
    std::vector<int64_t> pcls, tcls;
  };
  std::vector<Case> cases;
  std::string script;
  for (int k = 0; k < 12; ++k) {
    Case c;
    const int n = k == 0 ? 0 : 20 * k;
    for (int i = 0; i < n; ++i) {
      // True positives thin out as the threshold rises, as matching makes them.
      Correct tp{};
      const double q = u(rng);
      for (int t = 0; t < kNumIouThresholds; ++t) tp[t] = q < 0.6 - 0.05 * t;
      c.tp.push_back(tp);
      c.conf.push_back(k % 2 ? std::round(20 * u(rng)) / 20 : u(rng));
      c.pcls.push_back(cls(rng));
    }
    for (int i = 0; i < 3 + 5 * k; ++i)
      c.tcls.push_back(cls(rng) % 5);  // class 5: no labels
    // A label matches one prediction: no more true positives than labels.
    for (int t = 0; t < kNumIouThresholds; ++t) {
      std::vector<int64_t> left(6, 0);
      for (int64_t l : c.tcls) ++left[l];
      for (int i = 0; i < n; ++i) {
        if (c.tp[i][t] && left[c.pcls[i]]-- <= 0) c.tp[i][t] = false;
      }
    }
    absl::StrAppend(&script, "emit_ap_per_class(f, ap_per_class(", PyCorrect(c.tp), ", ",
                    PyArray(c.conf, "float64"), ", ", PyArray(c.pcls, "int64"), ", ",
                    PyArray(c.tcls, "int64"), "))\n");
    cases.push_back(std::move(c));
  }
  auto out = RunNumpy(script);
  SKIP_WITHOUT_NUMPY(out);
  size_t line = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.conf.size(), " predictions"));
    auto got = ApPerClass(c.tp, c.conf, c.pcls, c.tcls);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectApPerClassEqual(*got, *out, line);
  }
  EXPECT_EQ(line, out->size());
}

// The whole evaluation, one process against three ranks whose records are
// serialized, padded and gathered (rank 2 evaluates image 0 again, as a
// padded shard does), and both against the reference.
TEST(DetectionStatsVsYolov5Test, RanksGatheredEqualOneProcessAndTheReference) {
  std::mt19937 rng(6);
  std::vector<RandomImage> images;
  std::string script = "images = [\n";
  for (int k = 0; k < 150; ++k) {
    images.push_back(MakeImage(1000 + k, rng));
    absl::StrAppend(&script, PyImage(images.back()), ",\n");
  }
  script += "]\nemit(f, summarize(images))\n";
  DetectionStats one;
  std::vector<DetectionStats> ranks(3);
  for (const RandomImage& im : images) {
    ASSERT_TRUE(one.AddImageIou(im.id, im.iou, im.conf, im.pcls, im.lcls).ok());
    ASSERT_TRUE(ranks[(im.id * 7) % 3]
                    .AddImageIou(im.id, im.iou, im.conf, im.pcls, im.lcls)
                    .ok());
  }
  const RandomImage& first = images[0];
  ASSERT_TRUE(
      ranks[2].AddImageIou(first.id, first.iou, first.conf, first.pcls, first.lcls).ok());
  std::vector<std::vector<double>> records;
  size_t longest = 0;
  for (const DetectionStats& r : ranks) {
    records.push_back(r.Serialize());
    longest = std::max(longest, records.back().size());
  }
  std::vector<double> gathered;
  for (std::vector<double>& r : records) {
    r.resize(longest, 0.0);
    gathered.insert(gathered.end(), r.begin(), r.end());
  }
  auto merged = DetectionStats::MergeGathered(gathered, 3);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->num_images(), 150);
  auto a = one.Summarize(6), b = merged->Summarize(6);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->images, 150);
  EXPECT_EQ(b->labels, a->labels);
  EXPECT_EQ(b->predictions, a->predictions);
  const std::vector<double> got = {a->precision, a->recall, a->map50, a->map50_95};
  EXPECT_EQ((std::vector<double>{b->precision, b->recall, b->map50, b->map50_95}), got);
  EXPECT_EQ(b->maps, a->maps);
  EXPECT_GT(a->map50, a->map50_95);
  EXPECT_EQ(a->labels_per_class[5], 0);
  EXPECT_EQ(a->maps[5], a->map50_95);  // no labels: the mean
  auto out = RunNumpy(script);
  SKIP_WITHOUT_NUMPY(out);
  ASSERT_EQ(out->size(), 1u);
  ExpectNear(got, (*out)[0], 1e-9, "P, R, mAP@0.5, mAP@0.5:0.95");
}

// ------------------------------------------------------------- plain tests

TEST(ApTest, ThresholdsAreYolov5sFloat32Linspace) {
  EXPECT_EQ(IouThresholds()[0], 0.5);
  EXPECT_EQ(IouThresholds()[3], static_cast<double>(0.65f));  // below 0.65
  EXPECT_EQ(IouThresholds()[9], static_cast<double>(0.95f));
}

TEST(ApTest, AFirstPredictionTakesItsLabel) {
  // Labels 0 and 1 (class 0); prediction 0 prefers label 1 (IoU 0.9), so
  // prediction 1, which overlaps label 1 only, finds it taken.
  const std::vector<double> iou = {0.6, 0.0,    // label 0 x predictions 0, 1
                                   0.9, 0.95};  // label 1
  auto correct = MatchPredictions(iou, {0, 0}, {0, 0});
  ASSERT_TRUE(correct.ok()) << correct.status();
  EXPECT_TRUE((*correct)[0][0]);
  EXPECT_FALSE((*correct)[1][0]);
  // Another class never matches.
  auto other = MatchPredictions(iou, {0, 0}, {1, 1});
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE((*other)[0][0] || (*other)[1][0]);
  EXPECT_FALSE(MatchPredictions(iou, {0}, {0, 0}).ok());
}

TEST(ApTest, EqualConfidencesKeepTheirOrder) {
  // Four predictions at one confidence, true, false, true, false; 2 labels.
  std::vector<Correct> tp(4, Correct{});
  tp[0][0] = tp[2][0] = true;
  auto r = ApPerClass(tp, {0.5, 0.5, 0.5, 0.5}, {0, 0, 0, 0}, {0, 0});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->classes.size(), 1u);
  // Envelope 1 up to recall 0.5, 2/3 to recall 1, 0 at recall 1 itself
  // (np.interp takes the last of equal recalls).
  const double want =
      0.49 + 0.01 * (1 + 2.0 / 3) / 2 + 0.49 * 2.0 / 3 + 0.01 * (2.0 / 3) / 2;
  EXPECT_NEAR(r->classes[0].ap[0], want, 1e-12);
  EXPECT_NEAR(r->classes[0].precision, 0.5, 1e-12);  // below the confidence: all 4
  EXPECT_NEAR(r->classes[0].recall, 1.0, 1e-12);
}

TEST(ApTest, ClassWithLabelsButNoPredictionsCountsAsZero) {
  DetectionStats s;
  const Correct hit = {true, true, true, true, true, true, true, true, true, true};
  ASSERT_TRUE(s.AddImage(0, {hit}, {0.9}, {0}, {0, 1}).ok());
  auto sum = s.Summarize(3);
  ASSERT_TRUE(sum.ok()) << sum.status();
  ASSERT_EQ(sum->per_class.classes.size(), 2u);
  const ClassAp& missing = sum->per_class.classes[1];
  EXPECT_EQ(missing.cls, 1);
  EXPECT_EQ(missing.num_labels, 1);
  EXPECT_EQ(missing.num_predictions, 0);
  EXPECT_EQ(missing.ap50(), 0);
  EXPECT_EQ(missing.recall, 0);
  // One prediction, right: YOLOv5's 101-point AP is 0.995 (the envelope
  // drops to 0 at recall 1 itself).
  EXPECT_NEAR(sum->per_class.classes[0].ap50(), 0.995, 1e-12);
  EXPECT_NEAR(sum->map50, 0.995 / 2, 1e-12);
  EXPECT_EQ(sum->labels_per_class, (std::vector<int64_t>{1, 1, 0}));
  EXPECT_NEAR(sum->maps[2], sum->map50_95, 0);
}

TEST(ApTest, NoPredictionsOrNoLabelsSummarizeToZero) {
  DetectionStats labels_only, predictions_only, empty;
  ASSERT_TRUE(labels_only.AddImage(0, {}, {}, {}, {0, 2}).ok());
  ASSERT_TRUE(predictions_only.AddImage(0, {Correct{}}, {0.7}, {1}, {}).ok());
  for (const DetectionStats* s : {&labels_only, &predictions_only, &empty}) {
    auto sum = s->Summarize(3);
    ASSERT_TRUE(sum.ok()) << sum.status();
    EXPECT_EQ(sum->map50_95, 0);
    EXPECT_EQ(sum->precision, 0);
    EXPECT_TRUE(sum->per_class.classes.empty());
    EXPECT_EQ(sum->maps, std::vector<double>(3, 0.0));
  }
  EXPECT_EQ(labels_only.Summarize(3)->labels, 2);
  EXPECT_EQ(predictions_only.Summarize(3)->predictions, 1);
  std::vector<Correct> two(2, Correct{true});
  EXPECT_FALSE(
      ApPerClass(two, {0.5, 0.4}, {0, 0}, {0}).ok());  // 2 true positives, 1 label
  auto none = ApPerClass({}, {}, {}, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->classes.empty());
}

TEST(ApTest, FitnessWeighsTheFourMetrics) {
  DetectionSummary s;
  s.precision = 0.8, s.recall = 0.6, s.map50 = 0.5, s.map50_95 = 0.3;
  EXPECT_NEAR(Fitness(s), 0.1 * 0.5 + 0.9 * 0.3, 1e-15);
  FitnessWeights w;
  w.precision = 1, w.recall = 2, w.map50 = 0, w.map50_95 = 0;
  EXPECT_NEAR(Fitness(s, w), 2.0, 1e-15);
  EXPECT_TRUE(ValidateFitnessWeights(FitnessWeights{}).ok());
  w.map50 = -0.1;
  absl::Status bad = ValidateFitnessWeights(w);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("map50"), std::string::npos);
  w.map50 = NAN;
  EXPECT_FALSE(ValidateFitnessWeights(w).ok());
}

TEST(ApTest, AddImageAndDeserializeRejectBadInput) {
  DetectionStats s;
  EXPECT_EQ(s.AddImage(0, {Correct{}}, {0.5, 0.6}, {0}, {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(s.AddImage(0, {Correct{}}, {NAN}, {0}, {}).ok());
  EXPECT_FALSE(s.AddImage(0, {}, {}, {}, {-1}).ok());
  ASSERT_TRUE(s.AddImage(3, {Correct{true}}, {0.5}, {1}, {1}).ok());
  EXPECT_EQ(s.AddImage(3, {}, {}, {}, {}).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(s.Summarize(1).ok());  // class 1 is not below 1

  const std::vector<double> good = s.Serialize();
  auto back = DetectionStats::Deserialize(good);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Serialize(), good);
  std::vector<double> bad = good;
  bad.pop_back();
  EXPECT_FALSE(DetectionStats::Deserialize(bad).ok());  // length disagrees
  bad = good;
  bad[0] -= 1, bad.pop_back();
  EXPECT_FALSE(DetectionStats::Deserialize(bad).ok());  // truncated image
  bad = good;
  bad[1] = 2;
  EXPECT_FALSE(DetectionStats::Deserialize(bad).ok());  // format
  bad = good;
  bad.back() = 0.5;
  EXPECT_FALSE(DetectionStats::Deserialize(bad).ok());  // a class not an integer
  EXPECT_TRUE(DetectionStats::MergeGathered(good, 1).ok());
  EXPECT_FALSE(DetectionStats::MergeGathered(good, 0).ok());
  EXPECT_FALSE(
      DetectionStats::MergeGathered(std::vector<double>(8, 0.0), 2).ok());  // no length
}

}  // namespace
}  // namespace elastrun::trainer::detect
