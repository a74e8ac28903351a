// Helpers of the detection data tests: files written in place, folders
// made on the way, and a matcher for labels read back from text.
#ifndef ELASTRUN_TRAINER_DETECT_DATA_TEST_UTIL_H_
#define ELASTRUN_TRAINER_DETECT_DATA_TEST_UTIL_H_

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "trainer/detect/data_labels.h"
#include "trainer/detect/image.h"

namespace elastrun::trainer::detect::test_util {

// Writes `text` to `path`, making its folder.
inline void WriteText(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// A width x height grey PNG at `path`.
inline void WriteImage(const std::string& path, int width, int height) {
  Image image(width, height);
  std::fill(image.pixels.begin(), image.pixels.end(), 128);
  WriteText(path, *EncodeImage(image, ImageFormat::kPng));
}

// A Label of class `cls` whose box is within 1e-6 of (cx, cy, w, h).
MATCHER_P5(LabelNear, cls, cx, cy, w, h, "") {
  return arg.cls == cls && std::abs(arg.cx - cx) < 1e-6 && std::abs(arg.cy - cy) < 1e-6 &&
         std::abs(arg.w - w) < 1e-6 && std::abs(arg.h - h) < 1e-6;
}

}  // namespace elastrun::trainer::detect::test_util

#endif  // ELASTRUN_TRAINER_DETECT_DATA_TEST_UTIL_H_
