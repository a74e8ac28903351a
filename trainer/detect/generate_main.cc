// elastrun-detect-data: writes the Fashion-MNIST detection dataset
// (generate.h). Thin: parse flags, generate, print the summary.
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/strings.h"
#include "trainer/detect/generate.h"

namespace {

namespace detect = elastrun::trainer::detect;

constexpr char kBinary[] = "elastrun-detect-data";

constexpr char kIntro[] = R"(usage: elastrun-detect-data OUT_DIR [flags]

Writes a detection dataset made from Fashion-MNIST, no download needed:
its items (28x28 grey) scaled, stretched and tinted onto noisy coloured
canvases, several per image, each labelled with the tight box of its
visible pixels and its Fashion-MNIST class (10 classes, named). YOLOv5's
layout: OUT_DIR/images/{train,val}, OUT_DIR/labels/{train,val} (one
`class cx cy w h` line per object) and OUT_DIR/data.yaml. The same flags
give the same files, byte for byte.
)";

constexpr char kFooter[] =
    R"(Train images use Fashion-MNIST's training items, val images its test
items. data.yaml is written last; its `path` is OUT_DIR's absolute path
(move the folder: edit or delete that line). Train on it with
elastrun-train, or YOLOv5's train.py --data OUT_DIR/data.yaml.
)";

}  // namespace

int main(int argc, char** argv) {
  detect::GenerateOptions o;
  std::string format = "jpg", objects = "1:6", object_size = "24:96";
  int64_t seed = 0;
  auto app = elastrun::flags::NewApp(kBinary, kIntro, kFooter);
  app->add_option("out_dir", o.out_dir, "")->required()->type_name("OUT_DIR");
  app->add_option("--train", o.train_images, "training images (default 2000)")
      ->type_name("N")
      ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  app->add_option("--val", o.val_images, "validation images (default 500)")
      ->type_name("N")
      ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  app->add_option("--size", o.render.image_size, "image width and height (default 256)")
      ->type_name("PX");
  app->add_option("--objects", objects, "objects per image, MIN:MAX or N (default 1:6)")
      ->type_name("MIN:MAX");
  app->add_option("--object-size", object_size,
                  "an object's longer side, MIN:MAX pixels (default 24:96)")
      ->type_name("MIN:MAX");
  app->add_option("--seed", seed, "the dataset's seed (default 0)")
      ->type_name("S")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--format", format, "image files: jpg or png (default jpg)")
      ->type_name("jpg|png")
      ->check(CLI::IsMember({"jpg", "png"}));
  app->add_option("--quality", o.jpeg_quality, "JPEG quality, 1-100 (default 90)")
      ->type_name("Q");
  app->add_option("--fashion-mnist", o.fashion_mnist_root,
                  "Fashion-MNIST's folder (default /usr/share/datasets/fashion-mnist)")
      ->type_name("DIR");
  app->add_option("--threads", o.threads, "threads (default: one per CPU)")
      ->type_name("N")
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--overwrite", o.overwrite,
                "replace OUT_DIR's images/, labels/ and data.yaml when there");
  if (auto exit_code = elastrun::flags::Parse(*app, argc, argv)) return *exit_code;

  const auto usage = [](const std::string& message) {
    std::cerr << elastrun::flags::UsageError(kBinary, message);
    return elastrun::flags::kExitUsage;
  };
  absl::StatusOr<elastrun::IntRange> range = elastrun::ParseRange(objects, "--objects");
  if (!range.ok()) return usage(std::string(range.status().message()));
  o.render.min_objects = range->min;
  o.render.max_objects = range->max;
  range = elastrun::ParseRange(object_size, "--object-size");
  if (!range.ok()) return usage(std::string(range.status().message()));
  o.render.min_object_size = range->min;
  o.render.max_object_size = range->max;
  o.seed = static_cast<uint64_t>(seed);
  o.format = format == "png" ? detect::ImageFormat::kPng : detect::ImageFormat::kJpeg;
  if (absl::Status s = detect::CheckGenerateOptions(o); !s.ok()) {
    return usage(std::string(s.message()));
  }
  o.progress = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };

  absl::StatusOr<detect::GenerateSummary> s = detect::GenerateDataset(o);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kBinary, std::string(s.status().message()).c_str());
    return 1;
  }
  std::printf(
      "wrote %lld train + %lld val images (%lld + %lld objects, %.1f MB) in %.1f s\n",
      static_cast<long long>(s->train_images), static_cast<long long>(s->val_images),
      static_cast<long long>(s->train_objects), static_cast<long long>(s->val_objects),
      static_cast<double>(s->bytes) / 1e6, s->seconds);
  std::string classes;
  for (size_t c = 0; c < s->objects_per_class.size(); ++c) {
    classes += absl::StrFormat("%s%s %lld", c ? ", " : "", detect::kFashionMnistNames[c],
                               static_cast<long long>(s->objects_per_class[c]));
  }
  std::printf("objects per class: %s\n", classes.c_str());
  std::printf("dataset: %s\n", s->yaml_path.c_str());
  return 0;
}
