// A real detection dataset with no download: Fashion-MNIST items drawn on
// canvases (generate_render.h), written in YOLOv5's layout:
//
//   OUT/images/train/000000.jpg ...   OUT/labels/train/000000.txt ...
//   OUT/images/val/000000.jpg ...     OUT/labels/val/000000.txt ...
//   OUT/data.yaml                     path (absolute), train, val, nc, names
//
// Train images draw on Fashion-MNIST's training items, val images on its
// test items, so no item is in both. The same options and seed give the
// same bytes in every image and label file, whatever the thread count;
// data.yaml differs only by its `path` line (the folder's absolute path).
#ifndef ELASTRUN_TRAINER_DETECT_GENERATE_H_
#define ELASTRUN_TRAINER_DETECT_GENERATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/detect/generate_render.h"
#include "trainer/detect/image.h"

namespace elastrun::trainer::detect {

struct GenerateOptions {
  // Where the dataset goes; made when missing.
  std::string out_dir;
  // Images per split (either may be 0, not both).
  int64_t train_images = 2000;
  int64_t val_images = 500;
  // How each image is drawn: size, objects per image and their sizes.
  RenderOptions render;
  // Same seed, same dataset.
  uint64_t seed = 0;
  // kJpeg or kPng.
  ImageFormat format = ImageFormat::kJpeg;
  // JPEG quality, 1-100.
  int jpeg_quality = 90;
  // Debian's dataset-fashion-mnist (gzipped IDX files).
  std::string fashion_mnist_root = "/usr/share/datasets/fashion-mnist";
  // Threads drawing and writing images; 0: as many as the machine has.
  int threads = 0;
  // Replace OUT's images/, labels/ and data.yaml when they exist; without
  // it an existing dataset there is an error.
  bool overwrite = false;
  // Called with progress lines ("wrote 500/2500 images"), about every
  // tenth of the work, from the calling thread. May be empty.
  std::function<void(const std::string&)> progress;
};

struct GenerateSummary {
  int64_t train_images = 0;
  int64_t val_images = 0;
  int64_t train_objects = 0;
  int64_t val_objects = 0;
  // Objects per class over both splits.
  std::vector<int64_t> objects_per_class;
  // Bytes of the image and label files written.
  int64_t bytes = 0;
  double seconds = 0;
  std::string yaml_path;
};

// Checks `options` before anything is read or written: InvalidArgument
// naming the field (and its flag) for a size below 32, object counts or
// sizes out of order or above the image, no images, a format other than
// JPEG or PNG, a JPEG quality out of 1-100.
absl::Status CheckGenerateOptions(const GenerateOptions& options);

// Writes the dataset. Errors: CheckGenerateOptions'; FailedPrecondition
// when OUT already holds images/, labels/ or data.yaml and `overwrite` is
// false (naming them), or a file cannot be written; Fashion-MNIST's read
// errors (NotFound: install dataset-fashion-mnist). data.yaml is written
// last: a folder without it was not finished.
absl::StatusOr<GenerateSummary> GenerateDataset(const GenerateOptions& options);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_GENERATE_H_
