// Which images a split's source names, and where each one's labels are,
// torch-free. A source is, as in YOLOv5's LoadImagesAndLabels:
//
//   a folder: every file below it with an image extension (YOLOv5's
//     bmp dng jpeg jpg mpo png tif tiff webp, any case); labels in the
//     sibling labels/ tree (LabelPathFor);
//   a text file of image paths, one a line (labels as above), or of seed
//     004's annotation lines, `path x1,y1,x2,y2,class ...` (labels inline):
//     a file is read as annotation lines when any line ends with a box;
//     relative paths in either are taken from the text file's folder;
//   one image file.
#ifndef ELASTRUN_TRAINER_DETECT_DATA_LIST_H_
#define ELASTRUN_TRAINER_DETECT_DATA_LIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/detect/data_labels.h"

namespace elastrun::trainer::detect {

// One image to scan and where its objects are.
struct ImageSource {
  std::string image;
  // YOLOv5's form: the label file (which may not exist: no objects).
  std::string label_file;
  // Annotation lines: the line ("file:line") and its boxes, in pixels.
  bool annotated = false;
  std::string where;
  std::vector<PixelBox> boxes;
};

// What a source lists.
struct SourceList {
  std::vector<ImageSource> images;
  // Annotation lines that do not parse, each a warning naming file:line,
  // and how many there were (their images are left out).
  std::vector<std::string> warnings;
  int64_t corrupt = 0;
};

// Whether `path` ends in one of YOLOv5's image extensions (any case).
bool HasImageExtension(absl::string_view path);

// YOLOv5's img2label_paths: the last "/images/" in `image_path` becomes
// "/labels/" and the extension ".txt" (a path without "/images/" keeps its
// folder).
std::string LabelPathFor(absl::string_view image_path);

// Lists `source` (see above) for a dataset of `num_classes` classes.
// Errors name the source: NotFound (it does not exist), FailedPrecondition
// (a folder that cannot be read), InvalidArgument (no images in it: naming
// the extensions looked for), OutOfRange (an annotation line's class >=
// num_classes, naming file:line).
absl::StatusOr<SourceList> ListSource(const std::string& source, int num_classes);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_DATA_LIST_H_
