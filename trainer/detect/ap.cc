#include "trainer/detect/ap.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace elastrun::trainer::detect {
namespace {

// Doubles hold integers exactly below this.
constexpr int64_t kMaxExact = int64_t{1} << 53;
// The first value after a record's length: its format.
constexpr int64_t kSerialFormat = 1;
// ap_per_class's eps (recall's and F1's denominators).
constexpr double kEps = 1e-16;

// np.linspace(0, 1, n), value for value.
std::vector<double> Linspace01(int n) {
  std::vector<double> v(n);
  const double step = 1.0 / (n - 1);
  for (int k = 0; k < n; ++k) v[k] = k * step;
  v[n - 1] = 1.0;
  return v;
}

// np.interp(x, xp, fp, left, right) for a non-decreasing, non-empty xp:
// numpy's rules, the same arithmetic (the last xp[j] <= x is the segment;
// at an xp itself, its fp).
double Interp(double x, absl::Span<const double> xp, absl::Span<const double> fp,
              double left, double right) {
  const size_t n = xp.size();
  if (std::isnan(x)) return x;
  if (x > xp[n - 1]) return right;
  if (x < xp[0]) return left;
  const size_t j = std::upper_bound(xp.begin(), xp.end(), x) - xp.begin() - 1;
  if (j == n - 1 || xp[j] == x) return fp[j];
  const double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
  double y = slope * (x - xp[j]) + fp[j];
  if (std::isnan(y)) {
    y = slope * (x - xp[j + 1]) + fp[j + 1];
    if (std::isnan(y) && fp[j] == fp[j + 1]) y = fp[j];
  }
  return y;
}

// YOLOv5's smooth(y, f): a box filter of odd width round(2 f n) // 2 + 1,
// the ends padded with the end values.
std::vector<double> Smooth(const std::vector<double>& y, double f) {
  const int n = static_cast<int>(y.size());
  const int nf = static_cast<int>(std::nearbyint(n * f * 2)) / 2 + 1;
  std::vector<double> padded(nf / 2, y.front());
  padded.insert(padded.end(), y.begin(), y.end());
  padded.insert(padded.end(), nf / 2, y.back());
  const double w = 1.0 / nf;
  std::vector<double> out(n);
  for (int k = 0; k < n; ++k) {
    double s = 0;
    for (int m = 0; m < nf; ++m) s += padded[k + m] * w;
    out[k] = s;
  }
  return out;
}

absl::Status CheckNoNan(absl::Span<const double> conf, const char* what) {
  for (double c : conf) {
    if (std::isnan(c))
      return absl::InvalidArgumentError(absl::StrCat(what, ": a confidence is NaN"));
  }
  return absl::OkStatus();
}

// Reads data[pos++] as an integer in [lo, hi]; `what` names it in errors.
absl::StatusOr<int64_t> ReadInt(absl::Span<const double> data, size_t& pos, int64_t lo,
                                int64_t hi, const char* what) {
  if (pos >= data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DetectionStats record: ends at value ", pos, " before its ", what));
  }
  const double v = data[pos++];
  if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi)) ||
      std::floor(v) != v) {
    return absl::InvalidArgumentError(
        absl::StrCat("DetectionStats record: value ", pos - 1, " (", what, ") is ", v,
                     "; want an integer in [", lo, ", ", hi, "]"));
  }
  return static_cast<int64_t>(v);
}

}  // namespace

const std::array<double, kNumIouThresholds>& IouThresholds() {
  // torch.linspace(0.5, 0.95, 10) in float32, YOLOv5's iouv: an IoU in
  // float32 meets a threshold exactly when it does there.
  static const std::array<double, kNumIouThresholds> kThresholds = {
      0.5f, 0.55f, 0.6f, 0.65f, 0.7f, 0.75f, 0.8f, 0.85f, 0.9f, 0.95f};
  return kThresholds;
}

absl::StatusOr<std::vector<Correct>> MatchPredictions(
    absl::Span<const double> iou, absl::Span<const int64_t> label_classes,
    absl::Span<const int64_t> pred_classes) {
  const size_t nl = label_classes.size(), np = pred_classes.size();
  if (iou.size() != nl * np) {
    return absl::InvalidArgumentError(
        absl::StrCat("MatchPredictions: iou has ", iou.size(),
                     " values; want labels x predictions = ", nl, " x ", np));
  }
  RETURN_IF_ERROR(CheckNoNan(iou, "MatchPredictions iou"));
  std::vector<Correct> correct(np, Correct{});
  std::vector<int64_t> best(np), first(nl);
  for (int t = 0; t < kNumIouThresholds; ++t) {
    const double threshold = IouThresholds()[t];
    // Each prediction's label: the highest IoU >= threshold, the later label on ties.
    for (size_t p = 0; p < np; ++p) {
      best[p] = -1;
      for (size_t l = 0; l < nl; ++l) {
        const double v = iou[l * np + p];
        if (v >= threshold && label_classes[l] == pred_classes[p] &&
            (best[p] < 0 || v >= iou[best[p] * np + p])) {
          best[p] = static_cast<int64_t>(l);
        }
      }
    }
    // Each label: the first prediction that picked it.
    std::fill(first.begin(), first.end(), -1);
    for (size_t p = 0; p < np; ++p) {
      if (best[p] >= 0 && first[best[p]] < 0) first[best[p]] = static_cast<int64_t>(p);
    }
    for (int64_t p : first) {
      if (p >= 0) correct[p][t] = true;
    }
  }
  return correct;
}

absl::StatusOr<ApCurve> ComputeAp(absl::Span<const double> recall,
                                  absl::Span<const double> precision, ApMethod method) {
  if (recall.size() != precision.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ComputeAp: ", recall.size(), " recalls and ", precision.size(),
                     " precisions; want one of each per point"));
  }
  ApCurve c;
  c.recall.reserve(recall.size() + 2);
  c.recall.push_back(0.0);
  c.recall.insert(c.recall.end(), recall.begin(), recall.end());
  c.recall.push_back(1.0);
  c.precision.reserve(precision.size() + 2);
  c.precision.push_back(1.0);
  c.precision.insert(c.precision.end(), precision.begin(), precision.end());
  c.precision.push_back(0.0);
  for (size_t i = c.precision.size() - 1; i-- > 0;) {
    c.precision[i] = std::max(c.precision[i], c.precision[i + 1]);
  }
  if (method == ApMethod::kInterp101) {
    static const std::vector<double> kRecalls = Linspace01(101);
    double prev = Interp(kRecalls[0], c.recall, c.precision, c.precision.front(),
                         c.precision.back());
    for (size_t k = 1; k < kRecalls.size(); ++k) {
      const double y = Interp(kRecalls[k], c.recall, c.precision, c.precision.front(),
                              c.precision.back());
      c.ap += (kRecalls[k] - kRecalls[k - 1]) * (y + prev) / 2.0;
      prev = y;
    }
  } else {
    for (size_t i = 0; i + 1 < c.recall.size(); ++i) {
      if (c.recall[i + 1] != c.recall[i])
        c.ap += (c.recall[i + 1] - c.recall[i]) * c.precision[i + 1];
    }
  }
  return c;
}

const std::vector<double>& CurveGrid() {
  static const std::vector<double> kGrid = Linspace01(kCurvePoints);
  return kGrid;
}

double ClassAp::ap50_95() const {
  return std::accumulate(ap.begin(), ap.end(), 0.0) / kNumIouThresholds;
}

absl::StatusOr<ApPerClassResult> ApPerClass(absl::Span<const Correct> tp,
                                            absl::Span<const double> conf,
                                            absl::Span<const int64_t> pred_cls,
                                            absl::Span<const int64_t> target_cls) {
  if (tp.size() != conf.size() || pred_cls.size() != conf.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ApPerClass: ", tp.size(), " tp rows, ", conf.size(), " confidences and ",
        pred_cls.size(), " classes; want one of each per prediction"));
  }
  RETURN_IF_ERROR(CheckNoNan(conf, "ApPerClass conf"));
  std::vector<size_t> order(conf.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return conf[a] > conf[b]; });
  std::map<int64_t, int64_t> labels;  // class -> number of labels, by class
  for (int64_t c : target_cls) ++labels[c];
  std::map<int64_t, std::vector<size_t>>
      ranked;  // class -> its predictions, by confidence
  for (size_t i : order) {
    if (labels.count(pred_cls[i]) > 0) ranked[pred_cls[i]].push_back(i);
  }

  const std::vector<double>& px = CurveGrid();
  ApPerClassResult result;
  for (const auto& [cls, num_labels] : labels) {
    ClassAp row;
    row.cls = cls;
    row.num_labels = num_labels;
    row.precision_curve.assign(kCurvePoints, 0.0);
    row.recall_curve.assign(kCurvePoints, 0.0);
    row.pr_curve.assign(kCurvePoints, 0.0);
    std::vector<double> neg_conf;  // -conf, increasing
    std::array<std::vector<double>, kNumIouThresholds> recall, precision;
    std::array<int64_t, kNumIouThresholds> tpc{};
    for (size_t i : ranked[cls]) {
      neg_conf.push_back(-conf[i]);
      const double n = static_cast<double>(neg_conf.size());
      for (int t = 0; t < kNumIouThresholds; ++t) {
        tpc[t] += tp[i][t];
        recall[t].push_back(tpc[t] / (num_labels + kEps));
        precision[t].push_back(tpc[t] / n);
      }
    }
    row.num_predictions = static_cast<int64_t>(neg_conf.size());
    for (int t = 0; t < kNumIouThresholds; ++t) {
      if (tpc[t] > num_labels) {
        return absl::InvalidArgumentError(
            absl::StrCat("ApPerClass: class ", cls, " has ", tpc[t],
                         " true positives at IoU threshold ", IouThresholds()[t], " but ",
                         num_labels, " labels; a label matches one prediction"));
      }
    }
    if (!neg_conf.empty()) {
      for (int m = 0; m < kCurvePoints; ++m) {
        row.recall_curve[m] = Interp(-px[m], neg_conf, recall[0], 0.0, recall[0].back());
        row.precision_curve[m] =
            Interp(-px[m], neg_conf, precision[0], 1.0, precision[0].back());
      }
      for (int t = 0; t < kNumIouThresholds; ++t) {
        ASSIGN_OR_RETURN(const ApCurve curve, ComputeAp(recall[t], precision[t]));
        row.ap[t] = curve.ap;
        if (t != 0) continue;
        for (int m = 0; m < kCurvePoints; ++m) {
          row.pr_curve[m] = Interp(px[m], curve.recall, curve.precision,
                                   curve.precision.front(), curve.precision.back());
        }
      }
    }
    row.f1_curve.resize(kCurvePoints);
    for (int m = 0; m < kCurvePoints; ++m) {
      const double p = row.precision_curve[m], r = row.recall_curve[m];
      row.f1_curve[m] = 2 * p * r / (p + r + kEps);
    }
    result.classes.push_back(std::move(row));
  }
  if (result.classes.empty()) return result;

  std::vector<double> mean_f1(kCurvePoints, 0.0);
  for (const ClassAp& row : result.classes) {
    for (int m = 0; m < kCurvePoints; ++m) mean_f1[m] += row.f1_curve[m];
  }
  for (double& f : mean_f1) f /= static_cast<double>(result.classes.size());
  const std::vector<double> smooth = Smooth(mean_f1, 0.1);
  const int best =
      static_cast<int>(std::max_element(smooth.begin(), smooth.end()) - smooth.begin());
  result.confidence = px[best];
  for (ClassAp& row : result.classes) {
    row.precision = row.precision_curve[best];
    row.recall = row.recall_curve[best];
    row.f1 = row.f1_curve[best];
    row.tp = std::nearbyint(row.recall * static_cast<double>(row.num_labels));
    row.fp = std::nearbyint(row.tp / (row.precision + kEps) - row.tp);
  }
  return result;
}

absl::Status ValidateFitnessWeights(const FitnessWeights& w) {
  const std::pair<const char*, double> fields[] = {{"precision", w.precision},
                                                   {"recall", w.recall},
                                                   {"map50", w.map50},
                                                   {"map50_95", w.map50_95}};
  for (const auto& [name, value] : fields) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fitness weight ", name, " = ", value, ": want a finite weight >= 0"));
    }
  }
  return absl::OkStatus();
}

double Fitness(const DetectionSummary& s, const FitnessWeights& w) {
  return w.precision * s.precision + w.recall * s.recall + w.map50 * s.map50 +
         w.map50_95 * s.map50_95;
}

absl::Status DetectionStats::AddImage(int64_t image_id, absl::Span<const Correct> correct,
                                      absl::Span<const double> conf,
                                      absl::Span<const int64_t> pred_cls,
                                      absl::Span<const int64_t> label_cls) {
  if (image_id <= -kMaxExact || image_id >= kMaxExact) {
    return absl::InvalidArgumentError(
        absl::StrCat("DetectionStats: image id ", image_id, " is beyond +-2^53"));
  }
  if (correct.size() != conf.size() || pred_cls.size() != conf.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DetectionStats image ", image_id, ": ", correct.size(),
                     " correct rows, ", conf.size(), " confidences and ", pred_cls.size(),
                     " classes; want one of each per prediction"));
  }
  RETURN_IF_ERROR(CheckNoNan(conf, "DetectionStats conf"));
  for (absl::Span<const int64_t> classes : {pred_cls, label_cls}) {
    for (int64_t c : classes) {
      if (c < 0 || c >= kMaxExact) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DetectionStats image ", image_id, ": class ", c, "; want a class >= 0"));
      }
    }
  }
  if (images_.count(image_id) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("DetectionStats: image ", image_id, " was added before"));
  }
  images_[image_id] = Image{{correct.begin(), correct.end()},
                            {conf.begin(), conf.end()},
                            {pred_cls.begin(), pred_cls.end()},
                            {label_cls.begin(), label_cls.end()}};
  return absl::OkStatus();
}

absl::Status DetectionStats::AddImageIou(int64_t image_id, absl::Span<const double> iou,
                                         absl::Span<const double> conf,
                                         absl::Span<const int64_t> pred_cls,
                                         absl::Span<const int64_t> label_cls) {
  ASSIGN_OR_RETURN(const std::vector<Correct> correct,
                   MatchPredictions(iou, label_cls, pred_cls));
  return AddImage(image_id, correct, conf, pred_cls, label_cls);
}

void DetectionStats::Merge(const DetectionStats& other) {
  for (const auto& [id, image] : other.images_) images_.emplace(id, image);
}

std::vector<double> DetectionStats::Serialize() const {
  std::vector<double> out = {0, static_cast<double>(kSerialFormat),
                             static_cast<double>(images_.size())};
  for (const auto& [id, image] : images_) {
    out.push_back(static_cast<double>(id));
    out.push_back(static_cast<double>(image.conf.size()));
    out.push_back(static_cast<double>(image.label_cls.size()));
    for (size_t p = 0; p < image.conf.size(); ++p) {
      int bits = 0;
      for (int t = 0; t < kNumIouThresholds; ++t) bits |= image.correct[p][t] << t;
      out.insert(out.end(), {image.conf[p], static_cast<double>(image.pred_cls[p]),
                             static_cast<double>(bits)});
    }
    for (int64_t c : image.label_cls) out.push_back(static_cast<double>(c));
  }
  out[0] = static_cast<double>(out.size());
  return out;
}

absl::StatusOr<DetectionStats> DetectionStats::Deserialize(
    absl::Span<const double> data) {
  size_t pos = 0;
  const int64_t size = static_cast<int64_t>(data.size());
  RETURN_IF_ERROR(ReadInt(data, pos, size, size, "length").status());
  RETURN_IF_ERROR(ReadInt(data, pos, kSerialFormat, kSerialFormat, "format").status());
  ASSIGN_OR_RETURN(const int64_t num_images,
                   ReadInt(data, pos, 0, size, "number of images"));
  DetectionStats stats;
  for (int64_t i = 0; i < num_images; ++i) {
    ASSIGN_OR_RETURN(const int64_t id,
                     ReadInt(data, pos, -kMaxExact + 1, kMaxExact - 1, "image id"));
    ASSIGN_OR_RETURN(const int64_t np,
                     ReadInt(data, pos, 0, size, "number of predictions"));
    ASSIGN_OR_RETURN(const int64_t nl, ReadInt(data, pos, 0, size, "number of labels"));
    Image image;
    for (int64_t p = 0; p < np; ++p) {
      if (pos >= data.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DetectionStats record: ends inside image ", id, "'s predictions"));
      }
      image.conf.push_back(data[pos++]);
      ASSIGN_OR_RETURN(const int64_t cls, ReadInt(data, pos, 0, kMaxExact - 1, "class"));
      ASSIGN_OR_RETURN(
          const int64_t bits,
          ReadInt(data, pos, 0, (1 << kNumIouThresholds) - 1, "correct bits"));
      image.pred_cls.push_back(cls);
      Correct c;
      for (int t = 0; t < kNumIouThresholds; ++t) c[t] = (bits >> t) & 1;
      image.correct.push_back(c);
    }
    for (int64_t l = 0; l < nl; ++l) {
      ASSIGN_OR_RETURN(const int64_t cls,
                       ReadInt(data, pos, 0, kMaxExact - 1, "label class"));
      image.label_cls.push_back(cls);
    }
    RETURN_IF_ERROR(
        stats.AddImage(id, image.correct, image.conf, image.pred_cls, image.label_cls));
  }
  if (pos != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DetectionStats record: ", data.size() - pos, " values after its last image"));
  }
  return stats;
}

absl::StatusOr<DetectionStats> DetectionStats::MergeGathered(
    absl::Span<const double> gathered, int64_t world_size) {
  if (world_size < 1 || gathered.size() % world_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MergeGathered: ", gathered.size(), " values do not split into ",
                     world_size, " equal records; want world_size >= 1 dividing them"));
  }
  const size_t stride = gathered.size() / world_size;
  DetectionStats all;
  for (int64_t r = 0; r < world_size; ++r) {
    absl::Span<const double> chunk = gathered.subspan(r * stride, stride);
    size_t pos = 0;
    ASSIGN_OR_RETURN(const int64_t length,
                     ReadInt(chunk, pos, 3, static_cast<int64_t>(stride), "length"));
    ASSIGN_OR_RETURN(const DetectionStats stats, Deserialize(chunk.subspan(0, length)));
    all.Merge(stats);
  }
  return all;
}

absl::StatusOr<DetectionSummary> DetectionStats::Summarize(int64_t num_classes) const {
  if (num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Summarize: num_classes = ", num_classes, "; want >= 1"));
  }
  std::vector<Correct> correct;
  std::vector<double> conf;
  std::vector<int64_t> pred_cls, target_cls;
  for (const auto& [id, image] : images_) {
    correct.insert(correct.end(), image.correct.begin(), image.correct.end());
    conf.insert(conf.end(), image.conf.begin(), image.conf.end());
    pred_cls.insert(pred_cls.end(), image.pred_cls.begin(), image.pred_cls.end());
    target_cls.insert(target_cls.end(), image.label_cls.begin(), image.label_cls.end());
  }
  DetectionSummary s;
  s.images = num_images();
  s.labels = static_cast<int64_t>(target_cls.size());
  s.predictions = static_cast<int64_t>(conf.size());
  s.labels_per_class.assign(num_classes, 0);
  for (absl::Span<const int64_t> classes :
       {absl::MakeConstSpan(pred_cls), absl::MakeConstSpan(target_cls)}) {
    for (int64_t c : classes) {
      if (c >= num_classes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Summarize: class ", c,
            " in the statistics; want classes below num_classes = ", num_classes));
      }
    }
  }
  for (int64_t c : target_cls) ++s.labels_per_class[c];
  s.maps.assign(num_classes, 0.0);
  const bool any_tp = std::any_of(correct.begin(), correct.end(), [](const Correct& c) {
    return std::any_of(c.begin(), c.end(), [](bool b) { return b; });
  });
  if (!any_tp) return s;
  ASSIGN_OR_RETURN(s.per_class, ApPerClass(correct, conf, pred_cls, target_cls));
  for (const ClassAp& row : s.per_class.classes) {
    s.precision += row.precision;
    s.recall += row.recall;
    s.map50 += row.ap50();
    s.map50_95 += row.ap50_95();
  }
  const double n = static_cast<double>(s.per_class.classes.size());
  s.precision /= n, s.recall /= n, s.map50 /= n, s.map50_95 /= n;
  std::fill(s.maps.begin(), s.maps.end(), s.map50_95);
  for (const ClassAp& row : s.per_class.classes) s.maps[row.cls] = row.ap50_95();
  return s;
}

}  // namespace elastrun::trainer::detect
