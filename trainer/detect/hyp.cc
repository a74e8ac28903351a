#include "trainer/detect/hyp.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/config/loader.h"
#include "common/status_macros.h"

namespace elastrun::trainer::detect {

using config::Node;
using config::Schema;
using config::Type;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The values a key accepts: an interval, each end open or closed; an
// infinite `high` is "no upper limit".
struct Range {
  double low;
  bool low_open;
  double high;
  bool high_open;

  bool Contains(double v) const {
    return (low_open ? v > low : v >= low) && (high_open ? v < high : v <= high);
  }
  std::string ToString() const {
    if (std::isinf(high)) return absl::StrCat(low_open ? "> " : ">= ", low);
    return absl::StrCat("in ", low_open ? "(" : "[", low, ", ", high, high_open ? ")" : "]");
  }
};

constexpr Range kPositive{0, true, kInf, true};
constexpr Range kNonNegative{0, false, kInf, true};
constexpr Range kProbability{0, false, 1, false};
constexpr Range kMomentum{0, false, 1, true};

// One numeric key of Hyp (all but `anchors`), in YOLOv5's order. The doc is
// YOLOv5's comment; the range is what makes sense at all, wider than
// evolution's bounds (HypBounds), which are a search space.
struct HypKey {
  const char* name;
  double Hyp::*field;
  Range range;
  const char* doc;
};

const std::vector<HypKey>& Keys() {
  static const std::vector<HypKey> keys = {
      {"lr0", &Hyp::lr0, kPositive, "initial learning rate (SGD=1E-2, Adam=1E-3)"},
      {"lrf", &Hyp::lrf, kPositive, "final OneCycleLR learning rate (lr0 * lrf)"},
      {"momentum", &Hyp::momentum, kMomentum, "SGD momentum/Adam beta1"},
      {"weight_decay", &Hyp::weight_decay, kNonNegative, "optimizer weight decay 5e-4"},
      {"warmup_epochs", &Hyp::warmup_epochs, kNonNegative, "warmup epochs (fractions ok)"},
      {"warmup_momentum", &Hyp::warmup_momentum, kMomentum, "warmup initial momentum"},
      {"warmup_bias_lr", &Hyp::warmup_bias_lr, kNonNegative, "warmup initial bias lr"},
      {"box", &Hyp::box, kNonNegative, "box loss gain"},
      {"cls", &Hyp::cls, kNonNegative, "cls loss gain"},
      {"cls_pw", &Hyp::cls_pw, kPositive, "cls BCELoss positive_weight"},
      {"obj", &Hyp::obj, kNonNegative, "obj loss gain (scale with pixels)"},
      {"obj_pw", &Hyp::obj_pw, kPositive, "obj BCELoss positive_weight"},
      {"iou_t", &Hyp::iou_t, kProbability,
       "IoU training threshold (accepted, unused by the loss, as in YOLOv5 since v5.0)"},
      {"anchor_t", &Hyp::anchor_t, Range{1, true, kInf, true}, "anchor-multiple threshold"},
      {"fl_gamma", &Hyp::fl_gamma, kNonNegative,
       "focal loss gamma (efficientDet default gamma=1.5)"},
      {"hsv_h", &Hyp::hsv_h, kProbability, "image HSV-Hue augmentation (fraction)"},
      {"hsv_s", &Hyp::hsv_s, kProbability, "image HSV-Saturation augmentation (fraction)"},
      {"hsv_v", &Hyp::hsv_v, kProbability, "image HSV-Value augmentation (fraction)"},
      {"degrees", &Hyp::degrees, Range{0, false, 180, false}, "image rotation (+/- deg)"},
      {"translate", &Hyp::translate, kProbability, "image translation (+/- fraction)"},
      // random_perspective draws the scale from U(1 - scale, 1 + scale).
      {"scale", &Hyp::scale, Range{0, false, 1, true}, "image scale (+/- gain)"},
      {"shear", &Hyp::shear, Range{0, false, 90, true}, "image shear (+/- deg)"},
      {"perspective", &Hyp::perspective, Range{0, false, 0.001, false},
       "image perspective (+/- fraction), range 0-0.001"},
      {"flipud", &Hyp::flipud, kProbability, "image flip up-down (probability)"},
      {"fliplr", &Hyp::fliplr, kProbability, "image flip left-right (probability)"},
      {"mosaic", &Hyp::mosaic, kProbability, "image mosaic (probability)"},
      {"mixup", &Hyp::mixup, kProbability, "image mixup (probability)"},
      {"copy_paste", &Hyp::copy_paste, kProbability,
       "segment copy-paste (probability); only 0: needs segment labels"},
      {"label_smoothing", &Hyp::label_smoothing, kProbability,
       "class label smoothing epsilon (train.py's --label-smoothing)"},
  };
  return keys;
}

constexpr char kAnchorsKey[] = "anchors";
constexpr char kAnchorsDoc[] = "anchors per output layer (0 to ignore); only 3 is supported";
// `anchors` sits after anchor_t in YOLOv5's files.
constexpr char kAnchorsAfter[] = "anchor_t";

// The shortest text that reads back as exactly `v`, with a '.' in the
// mantissa and a signed exponent: YAML 1.2 and PyYAML's YAML 1.1 (which
// reads "5e-4" as a string) both take it as a float.
std::string FormatDouble(double v) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  const size_t e = s.find('e');
  std::string mantissa = s.substr(0, e);
  if (mantissa.find('.') == std::string::npos) mantissa += ".0";
  return e == std::string::npos ? mantissa : mantissa + s.substr(e);
}

// Checks a merged value that came from `value` at dotted `path`.
absl::Status CheckValue(const HypKey& key, double v, const Node& value,
                        const std::string& path) {
  if (!std::isfinite(v)) {
    return config::ErrorAt(value.mark(), path, "must be a finite number");
  }
  if (!key.range.Contains(v)) {
    return config::ErrorAt(value.mark(), path,
                           absl::StrCat("must be ", key.range.ToString(), ", got ",
                                        FormatDouble(v)));
  }
  return absl::OkStatus();
}

// Where the winning value of each key was written.
struct Source {
  const Node* value;
  std::string path;
};

// Checks `raw` (the file's top level, or the config's section, at dotted
// `prefix`) against HypSchema and records its keys in `sources`, a later
// call overriding an earlier one. `checked` keeps the values alive.
absl::Status Collect(const Node& raw, const std::string& prefix, Node* checked,
                     std::map<std::string, Source>* sources) {
  if (const Node* target = raw.Find("_target_")) {
    return config::ErrorAt(target->mark(), config::JoinPath(prefix, "_target_"),
                           "hyp is a plain section of numbers, it takes no _target_");
  }
  ASSIGN_OR_RETURN(*checked, HypSchema().Apply(raw, prefix));
  for (const config::MapEntry& e : raw.entries()) {
    (*sources)[e.key] = Source{checked->Find(e.key), config::JoinPath(prefix, e.key)};
  }
  return absl::OkStatus();
}

}  // namespace

bool operator==(const Hyp& a, const Hyp& b) {
  for (const HypKey& k : Keys()) {
    if (a.*k.field != b.*k.field) return false;
  }
  return a.anchors == b.anchors;
}

const Schema& HypSchema() {
  static const Schema* schema = [] {
    auto* s = new Schema("hyp");
    const Hyp defaults;
    for (const HypKey& k : Keys()) {
      s->Optional(k.name, Type::Double(), FormatDouble(defaults.*k.field), k.doc);
      if (std::string(k.name) == kAnchorsAfter) {
        // A double, so that an evolved file's "anchors: 3.0" reads too.
        s->Optional(kAnchorsKey, Type::Double(), absl::StrCat(defaults.anchors), kAnchorsDoc);
      }
    }
    return s;
  }();
  return *schema;
}

absl::StatusOr<Hyp> LoadHyp(const std::string& file, const Node* section) {
  std::map<std::string, Source> sources;
  Node from_file, from_section;
  if (!file.empty()) {
    ASSIGN_OR_RETURN(std::string text,
                     config::ReadFileFromDisk(file, config::Limits().max_file_bytes));
    ASSIGN_OR_RETURN(Node raw, config::ParseYaml(text, file));
    RETURN_IF_ERROR(Collect(raw, "", &from_file, &sources));
  }
  if (section != nullptr && !section->is_null()) {
    RETURN_IF_ERROR(Collect(*section, "hyp", &from_section, &sources));
  }

  Hyp hyp;
  for (const HypKey& k : Keys()) {
    auto it = sources.find(k.name);
    if (it == sources.end()) continue;
    const Node& value = *it->second.value;
    const double v = value.as_double();
    RETURN_IF_ERROR(CheckValue(k, v, value, it->second.path));
    hyp.*k.field = v;
  }
  if (hyp.copy_paste > 0) {
    const Source& s = sources.at("copy_paste");
    return config::ErrorAt(s.value->mark(), s.path,
                           "copy_paste needs segment labels, which these datasets do not "
                           "have; set it to 0");
  }
  if (auto it = sources.find(kAnchorsKey); it != sources.end()) {
    const Node& value = *it->second.value;
    const double v = value.as_double();
    if (v != 0 && v != 3) {
      return config::ErrorAt(
          value.mark(), it->second.path,
          absl::StrCat("anchors per output layer must be 3 (the model's) or 0 (ignore "
                       "the key), got ",
                       value.ScalarText()));
    }
    hyp.anchors = static_cast<int>(v);
  }
  return hyp;
}

const std::vector<HypBound>& HypBounds() {
  static const std::vector<HypBound> bounds = {
      {"lr0", false, 1e-5, 1e-1},
      {"lrf", false, 0.01, 1.0},
      {"momentum", false, 0.6, 0.98},
      {"weight_decay", false, 0.0, 0.001},
      {"warmup_epochs", false, 0.0, 5.0},
      {"warmup_momentum", false, 0.0, 0.95},
      {"warmup_bias_lr", false, 0.0, 0.2},
      {"box", false, 0.02, 0.2},
      {"cls", false, 0.2, 4.0},
      {"cls_pw", false, 0.5, 2.0},
      {"obj", false, 0.2, 4.0},
      {"obj_pw", false, 0.5, 2.0},
      {"iou_t", false, 0.1, 0.7},
      {"anchor_t", false, 2.0, 8.0},
      {"anchors", false, 2.0, 10.0},
      {"fl_gamma", false, 0.0, 2.0},
      {"hsv_h", true, 0.0, 0.1},
      {"hsv_s", true, 0.0, 0.9},
      {"hsv_v", true, 0.0, 0.9},
      {"degrees", true, 0.0, 45.0},
      {"translate", true, 0.0, 0.9},
      {"scale", true, 0.0, 0.9},
      {"shear", true, 0.0, 10.0},
      {"perspective", true, 0.0, 0.001},
      {"flipud", true, 0.0, 1.0},
      {"fliplr", true, 0.0, 1.0},
      {"mosaic", true, 0.0, 1.0},
      {"mixup", true, 0.0, 1.0},
      {"copy_paste", true, 0.0, 1.0},
  };
  return bounds;
}

std::string HypToYaml(const Hyp& hyp) {
  std::string out =
      "# Hyperparameters of this run (YOLOv5 hyp.yaml; elastrun trainer/detect/hyp.h)\n\n";
  for (const HypKey& k : Keys()) {
    absl::StrAppend(&out, k.name, ": ", FormatDouble(hyp.*k.field), "  # ", k.doc, "\n");
    if (std::string(k.name) == kAnchorsAfter) {
      // YOLOv5 takes a set `anchors` as "replace the model's anchors": 3,
      // the model's own, stays a comment, as in YOLOv5's files.
      absl::StrAppend(&out, hyp.anchors == 3 ? "# " : "", kAnchorsKey, ": ", hyp.anchors,
                      "  # ", kAnchorsDoc, "\n");
    }
  }
  return out;
}

}  // namespace elastrun::trainer::detect
