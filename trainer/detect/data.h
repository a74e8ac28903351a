// The detector's dataset index, torch-free: for each image of a split its
// path, its size (from the file's header) and its objects as YOLOv5
// labels (class, cx, cy, w, h normalised), built from either dataset form
// (data_list.h: YOLOv5's images/ + labels/ folders or lists, seed 004's
// annotation lines) and checked as YOLOv5's verify_image_label checks them.
//
// What is skipped and what stops the load (trainer/detect/README.md,
// "Data"): a corrupt image or a malformed label line costs its image, with
// a counted warning; a class >= nc, a split without a single label file,
// a split left with no image, a bad data.yaml stop it with an error.
//
// Thread-safety: functions only; they start their own threads and join
// them before returning. The index is the same whatever the thread count.
#ifndef ELASTRUN_TRAINER_DETECT_DATA_H_
#define ELASTRUN_TRAINER_DETECT_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/detect/data_labels.h"
#include "trainer/detect/data_yaml.h"

namespace elastrun::trainer::detect {

// One usable image.
struct ImageEntry {
  // The file, as listed (a folder's entries joined to the folder; a list's
  // relative lines joined to the list's folder).
  std::string path;
  // As displayed (a JPEG's EXIF orientation applied); at least 10 each.
  int width = 0;
  int height = 0;
  // Its objects; empty for an image without any.
  std::vector<Label> labels;
};

// What a scan found, as YOLOv5 counts it ("N found, N missing, N empty,
// N corrupt").
struct ScanCounts {
  int64_t found = 0;       // label files (or annotation lines) read
  int64_t missing = 0;     // images without a label file: no objects
  int64_t empty = 0;       // empty label files or box-less lines: no objects
  int64_t corrupt = 0;     // images left out: a corrupt image or label
  int64_t duplicates = 0;  // repeated labels removed
  int64_t clipped = 0;     // boxes reaching beyond their image, clipped
  int64_t repeated = 0;    // images listed more than once, kept once
};

struct Split {
  // "train", "val", ...
  std::string name;
  // Usable images, sorted by path (bytewise), each once.
  std::vector<ImageEntry> images;
  ScanCounts counts;
  // One line per image left out or label file fixed, in path order:
  // "WARNING: ignoring corrupt image/label: <file[:line]>: <reason>",
  // "WARNING: <label file>: 2 duplicate labels removed", ...
  std::vector<std::string> warnings;

  // The number of objects over all images.
  int64_t num_labels() const;
};

struct ScanOptions {
  // Decode every image whole, not just its header: finds a JPEG corrupt in
  // the middle now rather than in training, for a full decode of the split.
  bool decode_images = false;
  // Threads reading headers and labels; 0: up to 8, as the machine has.
  int threads = 0;
};

// Scans the images of `sources` (data_list.h) for a dataset of
// `num_classes` classes. Errors: ListSource's; OutOfRange naming the
// first label file:line (in path order) whose class is >= num_classes, and
// how many such lines there are; NotFound when no image of a YOLOv5 form
// source has a label file ("an empty or missing labels folder", naming the
// label path expected for the first image); FailedPrecondition when every
// image was left out (naming the first reason).
absl::StatusOr<Split> ScanSplit(const std::string& name,
                                const std::vector<std::string>& sources, int num_classes,
                                const ScanOptions& options = {});

struct Dataset {
  DataYaml yaml;
  Split train;
  Split val;
};

// Reads data.yaml at `yaml_path` (data_yaml.h) and scans its train and val
// splits. Errors: ReadDataYaml's and ScanSplit's, each prefixed with the
// split ("val: ...").
absl::StatusOr<Dataset> LoadDataset(const std::string& yaml_path,
                                    const ScanOptions& options = {});

// One line on a split, YOLOv5's scan line with our counts:
// "train: 2000 images, 7012 objects; 2000 label files found, 0 missing,
// 0 empty, 1 corrupt (left out), 0 duplicate labels removed, 0 boxes
// clipped". Zero counts after "corrupt" are left out.
std::string ScanSummary(const Split& split);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_DATA_H_
