#include "trainer/detect/coco.h"

#include <cmath>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace elastrun::trainer::detect {
namespace {

using nlohmann::json;

// `box` (the `index`th of `what`) has a class below num_classes and a
// finite box with non-negative sides; detections a finite score too.
absl::Status CheckBox(const CocoBox& box, size_t index, const char* what,
                      int64_t num_classes) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", index, " (image ", box.image_id, "): ", why));
  };
  if (box.cls < 0 || box.cls >= num_classes) {
    return bad(
        absl::StrCat("class ", box.cls, "; want a class in [0, ", num_classes, ")"));
  }
  for (double v : {box.x1, box.y1, box.x2, box.y2, box.score}) {
    if (!std::isfinite(v)) return bad("a coordinate or the score is not finite");
  }
  if (box.x2 < box.x1 || box.y2 < box.y1) {
    return bad(absl::StrCat("box (", box.x1, ", ", box.y1, ", ", box.x2, ", ", box.y2,
                            "); want x2 >= x1 and y2 >= y1"));
  }
  return absl::OkStatus();
}

double Round(double v, double scale) { return std::round(v * scale) / scale; }

}  // namespace

absl::StatusOr<std::string> CocoInstancesJson(absl::Span<const CocoImage> images,
                                              absl::Span<const CocoBox> labels,
                                              absl::Span<const std::string> class_names,
                                              const CocoOptions& options) {
  if (class_names.empty()) {
    return absl::InvalidArgumentError(
        "CocoInstancesJson: no class names; want one per class");
  }
  json out = {{"info", {{"description", "elastrun-train evaluation set"}}},
              {"licenses", json::array()},
              {"images", json::array()},
              {"annotations", json::array()},
              {"categories", json::array()}};
  std::set<int64_t> ids;
  for (const CocoImage& im : images) {
    if (!ids.insert(im.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("CocoInstancesJson: image id ", im.id, " appears twice"));
    }
    if (im.width <= 0 || im.height <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("CocoInstancesJson: image ", im.id, " (", im.file_name, ") is ",
                       im.width, "x", im.height, "; want a size > 0"));
    }
    out["images"].push_back({{"id", im.id},
                             {"file_name", im.file_name},
                             {"width", im.width},
                             {"height", im.height}});
  }
  const int64_t num_classes = static_cast<int64_t>(class_names.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    const CocoBox& b = labels[i];
    RETURN_IF_ERROR(CheckBox(b, i, "CocoInstancesJson: label", num_classes));
    if (ids.count(b.image_id) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("CocoInstancesJson: label ", i,
                                                     " is of image ", b.image_id,
                                                     ", which is not among the images"));
    }
    const double w = b.x2 - b.x1, h = b.y2 - b.y1;
    out["annotations"].push_back({{"id", i + 1},
                                  {"image_id", b.image_id},
                                  {"category_id", b.cls + options.category_id_offset},
                                  {"bbox", {b.x1, b.y1, w, h}},
                                  {"area", w * h},
                                  {"iscrowd", 0}});
  }
  for (int64_t c = 0; c < num_classes; ++c) {
    out["categories"].push_back({{"id", c + options.category_id_offset},
                                 {"name", class_names[c]},
                                 {"supercategory", ""}});
  }
  return out.dump();
}

absl::StatusOr<std::string> CocoResultsJson(absl::Span<const CocoBox> detections,
                                            int64_t num_classes,
                                            const CocoOptions& options) {
  if (num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CocoResultsJson: num_classes = ", num_classes, "; want >= 1"));
  }
  json out = json::array();
  for (size_t i = 0; i < detections.size(); ++i) {
    const CocoBox& d = detections[i];
    RETURN_IF_ERROR(CheckBox(d, i, "CocoResultsJson: detection", num_classes));
    out.push_back({{"image_id", d.image_id},
                   {"category_id", d.cls + options.category_id_offset},
                   {"bbox",
                    {Round(d.x1, 1e3), Round(d.y1, 1e3), Round(d.x2 - d.x1, 1e3),
                     Round(d.y2 - d.y1, 1e3)}},
                   {"score", Round(d.score, 1e5)}});
  }
  return out.dump();
}

}  // namespace elastrun::trainer::detect
