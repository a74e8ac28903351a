// YOLOv5's dataset file, data.yaml, torch-free:
//
//   path: ../datasets/coco128   # the dataset's root (default: this file's folder)
//   train: images/train2017     # relative to path: a folder of images, a .txt
//   val: images/val2017         #   list of images (or annotation lines), or a
//   test:                       #   list of such; test is optional
//   nc: 80                      # optional when names is given
//   names: [person, bicycle]    # or a map {0: person, 1: bicycle}
//
// A relative `path` is taken from the folder holding data.yaml (YOLOv5
// takes it from its own folder; an absolute path means the same to both).
// Other keys (download, ...) are ignored.
#ifndef ELASTRUN_TRAINER_DETECT_DATA_YAML_H_
#define ELASTRUN_TRAINER_DETECT_DATA_YAML_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace elastrun::trainer::detect {

struct DataYaml {
  // The file read.
  std::string file;
  // `path`, resolved.
  std::string root;
  // The sources of each split, resolved against `root`; each exists.
  std::vector<std::string> train;
  std::vector<std::string> val;
  std::vector<std::string> test;  // empty without a test split
  // The class names; their number is nc.
  std::vector<std::string> names;
};

// Reads and checks `path`. Errors name the file, and the line and key where
// there is one ("data.yaml:3:8: train: ..."): NotFound (no such file),
// InvalidArgument for YAML syntax, a missing `train`, `val` or both of
// `nc` and `names` (naming the key and what it should hold), a value of the
// wrong type, nc < 1, names that are not nc, a names map whose keys are not
// 0..nc-1; NotFound for a split source that does not exist (naming the key,
// as written and resolved).
absl::StatusOr<DataYaml> ReadDataYaml(const std::string& path);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_DATA_YAML_H_
