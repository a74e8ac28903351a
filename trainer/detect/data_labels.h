// Reading the two label forms of a detection dataset, torch-free:
//
//   YOLOv5's label files: labels/X.txt for images/X.jpg, one object per
//     line, `class cx cy w h`, the box's centre and size divided by the
//     image's width and height; or `class x1 y1 x2 y2 x3 y3 ...`, a polygon
//     (normalised too), whose bounding box is the object's box.
//   Seed 004's annotation lines (bubbliiiing's YOLOv3): one image per line,
//     `path x1,y1,x2,y2,class x1,y1,x2,y2,class ...`, corners in pixels.
//
// Errors come in two kinds, so the caller can follow YOLOv5's policy:
// DataLoss for a malformed line (YOLOv5 ignores the image with a warning)
// and OutOfRange for a class >= the number of classes (YOLOv5 stops: the
// labels and data.yaml disagree). Both name the file and line.
#ifndef ELASTRUN_TRAINER_DETECT_DATA_LABELS_H_
#define ELASTRUN_TRAINER_DETECT_DATA_LABELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace elastrun::trainer::detect {

// One object: its class and its box, normalised to the image's width and
// height (YOLOv5's label columns; cx, cy, w, h in [0, 1]).
struct Label {
  int32_t cls = 0;
  float cx = 0;
  float cy = 0;
  float w = 0;
  float h = 0;

  friend bool operator==(const Label& a, const Label& b) {
    return a.cls == b.cls && a.cx == b.cx && a.cy == b.cy && a.w == b.w && a.h == b.h;
  }
};

// The labels of one image, and what was fixed on the way.
struct ImageLabels {
  std::vector<Label> labels;
  // Exact repeats of an earlier object, removed (YOLOv5 removes them too).
  int duplicates = 0;
  // Boxes reaching beyond the image by more than rounding, clipped to it.
  int clipped = 0;
  // The first clipped box's line, for the warning.
  int first_clipped_line = 0;
};

// Parses the text of a YOLOv5 label file named `file`, for `num_classes`
// classes. Blank lines are skipped; `\r\n` ends lines too. Errors,
// "file:line: ...": DataLoss for a line of fewer than 5 columns, an odd
// polygon, a value that is not a finite number, a class that is not a
// whole number, a negative value, a coordinate above 1 ("not normalised or
// out of bounds"); OutOfRange for a class >= num_classes.
absl::StatusOr<ImageLabels> ParseYoloLabels(absl::string_view text,
                                            const std::string& file, int num_classes);

// A box of an annotation line, in pixels.
struct PixelBox {
  double x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  int32_t cls = 0;
};

// One annotation line: the image's path as written, and its boxes.
struct AnnotationLine {
  std::string path;
  std::vector<PixelBox> boxes;
};

// Whether `token` is a box of an annotation line: five comma-separated
// numbers (`x1,y1,x2,y2,class`).
bool IsBoxToken(absl::string_view token);

// Parses one annotation line (not blank). The trailing whitespace-separated
// tokens that hold commas are boxes; everything before them is the path, so
// a path may hold spaces. `where` ("file:line") labels errors: DataLoss for
// a box that is not five numbers, a non-whole or negative class, no path;
// OutOfRange for a class >= num_classes.
absl::StatusOr<AnnotationLine> ParseAnnotationLine(absl::string_view line,
                                                   const std::string& where,
                                                   int num_classes);

// The labels of an annotation line's boxes for a width x height image.
// Boxes reaching beyond the image are clipped (counted); duplicates are
// removed. DataLoss ("where: box 1 (x1,y1,x2,y2 = ...): ...") for an empty
// or inverted box, or one wholly outside the image.
absl::StatusOr<ImageLabels> PixelBoxesToLabels(const std::vector<PixelBox>& boxes,
                                               int width, int height,
                                               const std::string& where);

// `text` for a message: valid UTF-8 as is, other bytes and control
// characters as \xNN (file names on Linux are bytes).
std::string DisplayText(absl::string_view text);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_DATA_LABELS_H_
