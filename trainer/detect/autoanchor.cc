#include "trainer/detect/autoanchor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace elastrun::trainer::detect {
namespace {

// YOLOv5's constants: k-means keeps boxes with a side of at least
// kMinSide px and warns about those with a side under kTinySide px; the
// mutations change each coordinate with probability kMutationProb by a
// factor 1 + N(0, 1) x U(0, 1) x kMutationSigma clipped to
// [kMinFactor, kMaxFactor], and no anchor side goes below kMinSide.
constexpr double kMinSide = 2.0;
constexpr double kTinySide = 3.0;
constexpr double kMutationProb = 0.9;
constexpr double kMutationSigma = 0.1;
constexpr double kMinFactor = 0.3;
constexpr double kMaxFactor = 3.0;
// The check's augmentation: each image's boxes scaled by U(0.9, 1.1).
constexpr double kMinScale = 0.9;
constexpr double kMaxScale = 1.1;
// scipy's kmeans stops when the mean distance falls by at most this; the
// cap only bounds a run that would crawl on.
constexpr double kKMeansThreshold = 1e-5;
constexpr int kMaxLloydIterations = 300;

constexpr char kPrefix[] = "AutoAnchor: ";

// ln(x) for x > 0 from +, -, x, / and frexp only: those are exact or
// correctly rounded on every IEEE-754 machine, where libm's log may differ
// in the last bit between libraries (and so would every normal draw).
double PortableLog(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752) {
    m *= 2;
    --e;
  }
  // ln m = 2 atanh(t) = 2 (t + t^3/3 + t^5/5 + ...), |t| <= 0.172: the
  // terms after t^23 are below 1e-18 of the sum.
  const double t = (m - 1) / (m + 1);
  const double t2 = t * t;
  double series = 0;
  for (int k = 11; k >= 1; --k) series = (series + 1.0 / (2 * k + 1)) * t2;
  constexpr double kLn2 = 0.693147180559945309417232121458176568;
  return e * kLn2 + 2 * t * (1 + series);
}

// Uniform and normal draws of a seeded std::mt19937_64 (whose sequence the
// standard fixes), defined here so that they are the same everywhere.
class Random {
 public:
  explicit Random(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, 1): the top 53 bits of one draw.
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  // Standard normal: Marsaglia's polar method, both values of a pair used.
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u, v, s;
    do {
      u = 2 * Uniform() - 1;
      v = 2 * Uniform() - 1;
      s = u * u + v * v;
    } while (s >= 1 || s == 0);
    const double f = std::sqrt(-2 * PortableLog(s) / s);
    spare_ = v * f;
    has_spare_ = true;
    return u * f;
  }

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// OK when box `label` (of image `image`, when >= 0) has a size.
absl::Status ValidateBox(const BoxSize& b, size_t label, int64_t image = -1) {
  if (std::isfinite(b.w) && std::isfinite(b.h) && b.w >= 0 && b.h >= 0)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "AutoAnchor: %slabel %d has size %gx%g; want finite sizes >= 0 px",
      image >= 0 ? absl::StrFormat("image %d, ", image) : "", label, b.w, b.h));
}

absl::Status ValidateBoxes(absl::Span<const BoxSize> boxes) {
  if (boxes.empty())
    return absl::InvalidArgumentError("AutoAnchor: no labels to fit anchors to");
  for (size_t i = 0; i < boxes.size(); ++i) RETURN_IF_ERROR(ValidateBox(boxes[i], i));
  return absl::OkStatus();
}

absl::Status ValidateAnchors(absl::Span<const BoxSize> anchors) {
  if (anchors.empty()) return absl::InvalidArgumentError("AutoAnchor: no anchors given");
  for (size_t i = 0; i < anchors.size(); ++i) {
    const BoxSize& a = anchors[i];
    if (!(std::isfinite(a.w) && std::isfinite(a.h) && a.w > 0 && a.h > 0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "AutoAnchor: anchor %d is %gx%g; want finite sizes > 0 px", i, a.w, a.h));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateAnchorT(double anchor_t) {
  if (!(anchor_t > 1 && std::isfinite(anchor_t))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "AutoAnchor: anchor_t is %g; want a finite ratio > 1 (YOLOv5: 4.0)", anchor_t));
  }
  return absl::OkStatus();
}

absl::Status ValidateOptions(const AutoAnchorOptions& o) {
  RETURN_IF_ERROR(ValidateAnchorT(o.anchor_t));
  if (o.image_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("AutoAnchor: image_size is %d; want > 0 px", o.image_size));
  }
  if (o.generations < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("AutoAnchor: generations is %d; want >= 0", o.generations));
  }
  if (o.kmeans_restarts < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "AutoAnchor: kmeans_restarts is %d; want >= 1", o.kmeans_restarts));
  }
  return absl::OkStatus();
}

// Boxes laid out for the fitness loop, which runs `generations` times over
// all of them: each side and its reciprocal, so that min(r, 1/r) costs two
// products and no division.
struct FitnessBoxes {
  std::vector<double> w, h, inv_w, inv_h;
  std::vector<double> best;  // scratch: best x per box

  explicit FitnessBoxes(absl::Span<const BoxSize> boxes) {
    for (const BoxSize& b : boxes) {
      w.push_back(b.w);
      h.push_back(b.h);
      inv_w.push_back(1 / b.w);  // inf for a 0 side: its x is then 0
      inv_h.push_back(1 / b.h);
    }
    best.resize(boxes.size());
  }

  // YOLOv5's anchor_fitness: the mean over boxes of the best anchor's x
  // where it passes the threshold, else 0. Anchors are > 0 and finite.
  double Fitness(absl::Span<const BoxSize> anchors, double thr) {
    const size_t n = w.size();
    // Plain pointers and selects, no std::min's branches: a loop the
    // compiler vectorizes (the sum stays in order).
    const double* __restrict bw = w.data();
    const double* __restrict bh = h.data();
    const double* __restrict inv_bw = inv_w.data();
    const double* __restrict inv_bh = inv_h.data();
    double* __restrict x = best.data();
    for (size_t i = 0; i < n; ++i) x[i] = 0;
    for (const BoxSize& a : anchors) {
      const double aw = a.w, ah = a.h, inv_aw = 1 / a.w, inv_ah = 1 / a.h;
      for (size_t i = 0; i < n; ++i) {
        const double rw = bw[i] * inv_aw, rw_inv = aw * inv_bw[i];
        const double rh = bh[i] * inv_ah, rh_inv = ah * inv_bh[i];
        const double xw = rw < rw_inv ? rw : rw_inv;
        const double xh = rh < rh_inv ? rh : rh_inv;
        const double xa = xw < xh ? xw : xh;
        x[i] = x[i] > xa ? x[i] : xa;
      }
    }
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += x[i] > thr ? x[i] : 0.0;
    return sum / static_cast<double>(n);
  }
};

void SortByArea(std::vector<BoxSize>& anchors) {
  std::stable_sort(
      anchors.begin(), anchors.end(),
      [](const BoxSize& a, const BoxSize& b) { return a.w * a.h < b.w * b.h; });
}

// One k-means run of Lloyd's iterations from k-means++ seeds on `points`
// (whitened). No centroids when the seeds or an iteration leave fewer than
// k non-empty clusters (scipy's kmeans then returns fewer centroids, and
// YOLOv5 gives up on k-means).
struct Clustering {
  std::vector<BoxSize> centroids;
  double distortion = std::numeric_limits<double>::infinity();  // mean distance
};

Clustering KMeansRun(absl::Span<const BoxSize> points, int k, Random& random) {
  const size_t n = points.size();
  auto d2 = [](const BoxSize& a, const BoxSize& b) {
    const double dw = a.w - b.w, dh = a.h - b.h;
    return dw * dw + dh * dh;
  };
  std::vector<BoxSize> c;
  c.push_back(points[std::min(n - 1, static_cast<size_t>(random.Uniform() * n))]);
  std::vector<double> nearest(n);
  for (size_t i = 0; i < n; ++i) nearest[i] = d2(points[i], c[0]);
  while (static_cast<int>(c.size()) < k) {
    double total = 0;
    for (double d : nearest) total += d;
    if (total == 0) return {};  // fewer distinct points than clusters
    const double target = random.Uniform() * total;
    size_t pick = 0;
    double cumulative = 0;
    for (size_t i = 0; i < n; ++i) {
      if (nearest[i] == 0) continue;
      pick = i;
      cumulative += nearest[i];
      if (cumulative > target) break;
    }
    c.push_back(points[pick]);
    for (size_t i = 0; i < n; ++i)
      nearest[i] = std::min(nearest[i], d2(points[i], c.back()));
  }

  std::vector<int> label(n);
  double previous = std::numeric_limits<double>::infinity();
  double distortion = previous;
  for (int iteration = 0; iteration < kMaxLloydIterations; ++iteration) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) {
      int best = 0;
      double best_d2 = d2(points[i], c[0]);
      for (int j = 1; j < k; ++j) {
        const double d = d2(points[i], c[j]);
        if (d < best_d2) best_d2 = d, best = j;
      }
      label[i] = best;
      sum += std::sqrt(best_d2);
    }
    distortion = sum / static_cast<double>(n);
    std::vector<BoxSize> mean(k);
    std::vector<size_t> count(k, 0);
    for (size_t i = 0; i < n; ++i) {
      mean[label[i]].w += points[i].w;
      mean[label[i]].h += points[i].h;
      ++count[label[i]];
    }
    for (int j = 0; j < k; ++j) {
      if (count[j] == 0) return {};
      c[j] = {mean[j].w / count[j], mean[j].h / count[j]};
    }
    if (std::abs(previous - distortion) <= kKMeansThreshold) break;
    previous = distortion;
  }
  return {std::move(c), distortion};
}

// k anchors in pixels for `boxes` (kept, at least kMinSide on a side):
// whitened k-means, the best of `restarts` runs; empty when no run gives k
// clusters. A side with no spread is left unwhitened (YOLOv5 would divide
// by 0 and fall back to random anchors).
std::vector<BoxSize> WhitenedKMeans(absl::Span<const BoxSize> boxes, int k, int restarts,
                                    Random& random) {
  const double n = static_cast<double>(boxes.size());
  double mw = 0, mh = 0;
  for (const BoxSize& b : boxes) mw += b.w, mh += b.h;
  mw /= n, mh /= n;
  double vw = 0, vh = 0;
  for (const BoxSize& b : boxes)
    vw += (b.w - mw) * (b.w - mw), vh += (b.h - mh) * (b.h - mh);
  double sw = std::sqrt(vw / n), sh = std::sqrt(vh / n);  // numpy's std (ddof 0)
  if (!(sw > 0)) sw = 1;
  if (!(sh > 0)) sh = 1;
  std::vector<BoxSize> points;
  points.reserve(boxes.size());
  for (const BoxSize& b : boxes) points.push_back({b.w / sw, b.h / sh});
  Clustering best;
  for (int r = 0; r < restarts; ++r) {
    Clustering run = KMeansRun(points, k, random);
    if (!run.centroids.empty() && run.distortion < best.distortion) best = std::move(run);
  }
  for (BoxSize& c : best.centroids) c = {c.w * sw, c.h * sh};
  return best.centroids;
}

// YOLOv5's genetic refinement: `generations` mutations of all coordinates
// at once; a mutant replaces the anchors when its fitness is higher.
void Evolve(FitnessBoxes& boxes, double thr, int generations, Random& random,
            std::vector<BoxSize>& anchors, double& fitness) {
  const size_t m = anchors.size() * 2;
  std::vector<double> mutate(m), factor(m);
  std::vector<BoxSize> candidate(anchors.size());
  for (int g = 0; g < generations; ++g) {
    bool changed = false;
    while (!changed) {  // draw until some coordinate changes (no duplicate)
      for (double& p : mutate) p = random.Uniform();
      const double scale = random.Uniform();
      for (size_t i = 0; i < m; ++i) {
        const double gaussian = random.Normal();
        const double f =
            (mutate[i] < kMutationProb ? 1.0 : 0.0) * scale * gaussian * kMutationSigma +
            1;
        factor[i] = std::clamp(f, kMinFactor, kMaxFactor);
        changed = changed || factor[i] != 1;
      }
    }
    for (size_t j = 0; j < anchors.size(); ++j) {
      candidate[j] = {std::max(anchors[j].w * factor[2 * j], kMinSide),
                      std::max(anchors[j].h * factor[2 * j + 1], kMinSide)};
    }
    const double f = boxes.Fitness(candidate, thr);
    if (f > fitness) fitness = f, anchors = candidate;
  }
}

absl::StatusOr<KMeansAnchors> KMeansAnchorsWith(absl::Span<const BoxSize> boxes, int n,
                                                const AutoAnchorOptions& options,
                                                Random& random) {
  RETURN_IF_ERROR(ValidateOptions(options));
  RETURN_IF_ERROR(ValidateBoxes(boxes));
  if (n < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("AutoAnchor: %d anchors asked for; want >= 1", n));
  }
  KMeansAnchors out;
  std::vector<BoxSize> kept;
  int64_t tiny = 0;
  for (const BoxSize& b : boxes) {
    if (b.w < kTinySide || b.h < kTinySide) ++tiny;
    if (b.w >= kMinSide || b.h >= kMinSide) kept.push_back(b);
  }
  if (tiny > 0) {
    out.warnings.push_back(
        absl::StrFormat("%sWARNING: Extremely small objects found: %d of %d labels are < "
                        "%g pixels in size",
                        kPrefix, tiny, boxes.size(), kTinySide));
  }
  if (kept.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("AutoAnchor: all %d labels are under %g px on both sides; no box "
                        "to fit anchors to",
                        boxes.size(), kMinSide));
  }
  std::vector<BoxSize> k;
  if (static_cast<size_t>(n) <= kept.size()) {
    k = WhitenedKMeans(kept, n, options.kmeans_restarts, random);
  }
  if (k.empty()) {
    out.random_init = true;
    const std::string why =
        static_cast<size_t>(n) > kept.size()
            ? absl::StrFormat("%d labels are fewer than %d anchors", kept.size(), n)
            : absl::StrFormat("k-means found fewer than %d clusters in %d labels", n,
                              kept.size());
    out.warnings.push_back(absl::StrFormat(
        "%sWARNING: switching strategies from kmeans to random init: %s", kPrefix, why));
    std::vector<double> v(2 * static_cast<size_t>(n));
    for (double& x : v) x = random.Uniform();
    std::sort(v.begin(), v.end());
    for (int j = 0; j < n; ++j)
      k.push_back({v[2 * j] * options.image_size, v[2 * j + 1] * options.image_size});
  }
  // Every anchor a real box, as each mutation keeps them.
  for (BoxSize& a : k) a = {std::max(a.w, kMinSide), std::max(a.h, kMinSide)};
  SortByArea(k);

  const double thr = 1 / options.anchor_t;
  FitnessBoxes fitness_boxes(kept);
  out.fitness = fitness_boxes.Fitness(k, thr);
  Evolve(fitness_boxes, thr, options.generations, random, k, out.fitness);
  SortByArea(k);
  ASSIGN_OR_RETURN(out.fit, ComputeAnchorFit(boxes, k, options.anchor_t));
  out.anchors = std::move(k);
  return out;
}

// "10,13, 16,30, 33,23": rounded half to even, as Python's round.
std::string AnchorList(absl::Span<const BoxSize> anchors) {
  return absl::StrJoin(anchors, ", ", [](std::string* out, const BoxSize& a) {
    absl::StrAppendFormat(out, "%.0f,%.0f", std::nearbyint(a.w), std::nearbyint(a.h));
  });
}

}  // namespace

absl::StatusOr<std::vector<BoxSize>> LabelSizesAtTrainingSize(
    absl::Span<const BoxSize> normalized, int image_width, int image_height,
    int image_size) {
  if (image_width <= 0 || image_height <= 0 || image_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("AutoAnchor: image %dx%d at training size %d; want sizes > 0 px",
                        image_width, image_height, image_size));
  }
  const double longest = std::max(image_width, image_height);
  const double sw = image_size * (image_width / longest);
  const double sh = image_size * (image_height / longest);
  std::vector<BoxSize> out;
  out.reserve(normalized.size());
  for (const BoxSize& b : normalized) out.push_back({b.w * sw, b.h * sh});
  return out;
}

absl::StatusOr<AnchorFit> ComputeAnchorFit(absl::Span<const BoxSize> boxes,
                                           absl::Span<const BoxSize> anchors,
                                           double anchor_t) {
  RETURN_IF_ERROR(ValidateAnchorT(anchor_t));
  RETURN_IF_ERROR(ValidateBoxes(boxes));
  RETURN_IF_ERROR(ValidateAnchors(anchors));
  // As YOLOv5 divides: r = box / anchor, then 1 / r (not anchor / box), so
  // that the threshold comparisons match its metric bit for bit.
  const double thr = 1 / anchor_t;
  int64_t recalled = 0, above = 0;
  for (const BoxSize& b : boxes) {
    double best = 0;
    for (const BoxSize& a : anchors) {
      const double rw = b.w / a.w, rh = b.h / a.h;
      const double x = std::min(std::min(rw, 1 / rw), std::min(rh, 1 / rh));
      best = std::max(best, x);
      above += x > thr;
    }
    recalled += best > thr;
  }
  const double n = static_cast<double>(boxes.size());
  return AnchorFit{recalled / n, above / n};
}

absl::StatusOr<KMeansAnchors> ComputeKMeansAnchors(absl::Span<const BoxSize> boxes, int n,
                                                   const AutoAnchorOptions& options) {
  Random random(options.seed);
  return KMeansAnchorsWith(boxes, n, options, random);
}

absl::StatusOr<AutoAnchorResult> CheckAnchors(
    absl::Span<const std::vector<BoxSize>> images, absl::Span<const BoxSize> anchors,
    absl::Span<const double> strides, const AutoAnchorOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  std::vector<BoxSize> current(anchors.begin(), anchors.end());
  RETURN_IF_ERROR(CheckAnchorOrder(current, strides).status());
  Random random(options.seed);
  std::vector<BoxSize> boxes, scaled;
  for (size_t i = 0; i < images.size(); ++i) {
    const double s = kMinScale + (kMaxScale - kMinScale) * random.Uniform();
    for (size_t j = 0; j < images[i].size(); ++j) {
      const BoxSize& b = images[i][j];
      RETURN_IF_ERROR(ValidateBox(b, j, static_cast<int64_t>(i)));
      boxes.push_back(b);
      scaled.push_back({b.w * s, b.h * s});
    }
  }
  if (boxes.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "AutoAnchor: no labels in the %d training images to check the anchors against",
        images.size()));
  }
  AutoAnchorResult out;
  ASSIGN_OR_RETURN(out.old_fit, ComputeAnchorFit(scaled, anchors, options.anchor_t));
  out.message =
      absl::StrFormat("%s%.2f anchors/target, %.3f Best Possible Recall (BPR). ", kPrefix,
                      out.old_fit.aat, out.old_fit.bpr);
  out.anchors.assign(anchors.begin(), anchors.end());
  if (out.old_fit.bpr >= options.good_bpr) {
    absl::StrAppend(&out.message, "Current anchors are a good fit to dataset");
    return out;
  }
  ASSIGN_OR_RETURN(
      KMeansAnchors found,
      KMeansAnchorsWith(boxes, static_cast<int>(anchors.size()), options, random));
  out.warnings = std::move(found.warnings);
  out.new_anchors = std::move(found.anchors);
  ASSIGN_OR_RETURN(out.new_fit,
                   ComputeAnchorFit(scaled, out.new_anchors, options.anchor_t));
  out.replaced = out.new_fit.bpr > out.old_fit.bpr;
  absl::StrAppendFormat(
      &out.message,
      "Anchors are a poor fit, attempting to improve... new anchors: %s "
      "(%.2f anchors/target, BPR %.3f): ",
      AnchorList(out.new_anchors), out.new_fit.aat, out.new_fit.bpr);
  if (!out.replaced) {
    absl::StrAppend(&out.message, "no better, keeping the current anchors");
    return out;
  }
  out.anchors = out.new_anchors;
  ASSIGN_OR_RETURN(out.reversed, CheckAnchorOrder(out.anchors, strides));
  absl::StrAppend(&out.message, "replaced",
                  out.reversed ? " (levels reversed to the strides' order)" : "");
  return out;
}

absl::StatusOr<bool> CheckAnchorOrder(std::vector<BoxSize>& anchors,
                                      absl::Span<const double> strides) {
  const size_t levels = strides.size();
  if (levels == 0 || anchors.empty() || anchors.size() % levels != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("AutoAnchor: %d anchors over %d strides; want the same number of "
                        "anchors (>= 1) per "
                        "stride",
                        anchors.size(), levels));
  }
  const size_t per_level = anchors.size() / levels;
  auto mean_area = [&](size_t level) {
    double sum = 0;
    for (size_t j = 0; j < per_level; ++j) {
      const BoxSize& a = anchors[level * per_level + j];
      sum += a.w * a.h;
    }
    return sum / static_cast<double>(per_level);
  };
  const double da = mean_area(levels - 1) - mean_area(0);
  const double ds = strides[levels - 1] - strides[0];
  auto sign = [](double v) { return (v > 0) - (v < 0); };
  if (da == 0 || sign(da) == sign(ds)) return false;
  for (size_t i = 0; i < levels / 2; ++i) {
    std::swap_ranges(anchors.begin() + i * per_level,
                     anchors.begin() + (i + 1) * per_level,
                     anchors.begin() + (levels - 1 - i) * per_level);
  }
  return true;
}

}  // namespace elastrun::trainer::detect
