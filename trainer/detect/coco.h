// An evaluation in COCO's JSON formats, so that pycocotools or any COCO
// tool can re-evaluate it: the val set as an instances file (images,
// annotations, categories) and the predictions as a results file (one
// entry per detection), as YOLOv5's val.py writes them with --save-json.
// Boxes are in pixels of the original image; COCO's bbox is
// [x_min, y_min, width, height]. Torch-free.
//
// Thread-safety: pure functions.
#ifndef ELASTRUN_TRAINER_DETECT_COCO_H_
#define ELASTRUN_TRAINER_DETECT_COCO_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace elastrun::trainer::detect {

struct CocoImage {
  // The image's id: its index in the dataset, as DetectionStats keys it.
  int64_t id = 0;
  // Its file, relative to the images folder.
  std::string file_name;
  // Its size in pixels, > 0.
  int64_t width = 0;
  int64_t height = 0;
};

// A label (score unused) or a detection, corners in pixels.
struct CocoBox {
  int64_t image_id = 0;
  // The class index, in [0, number of classes).
  int64_t cls = 0;
  double x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  // A detection's confidence.
  double score = 0;
};

struct CocoOptions {
  // category_id = class + category_id_offset: COCO's ids start at 1, as
  // here by default; 0 writes the class index itself (YOLOv5's choice
  // outside COCO).
  int64_t category_id_offset = 1;
};

// The instances JSON of `images` with their `labels`, one category per
// name of `class_names` (class i is class_names[i]); annotation ids are
// 1, 2, ... in the order of `labels`, iscrowd 0, area width * height.
// InvalidArgument naming the offender unless class_names is not empty,
// image ids are unique with sizes > 0, and every label's image is in
// `images`, its class in range and its box finite with x2 >= x1, y2 >= y1.
absl::StatusOr<std::string> CocoInstancesJson(absl::Span<const CocoImage> images,
                                              absl::Span<const CocoBox> labels,
                                              absl::Span<const std::string> class_names,
                                              const CocoOptions& options = {});

// The results JSON of `detections` (a list; bbox rounded to 3 decimals and
// score to 5, as YOLOv5 writes them). InvalidArgument unless num_classes
// >= 1 and every detection's class is in range, its box finite with
// x2 >= x1, y2 >= y1 and its score finite.
absl::StatusOr<std::string> CocoResultsJson(absl::Span<const CocoBox> detections,
                                            int64_t num_classes,
                                            const CocoOptions& options = {});

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_COCO_H_
