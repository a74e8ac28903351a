#include "trainer/detect/generate.h"

#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/detect/data.h"
#include "trainer/idx.h"
#include "trainer/test_files.h"

namespace elastrun::trainer::detect {
namespace {

namespace fs = std::filesystem;
using ::elastrun::trainer::testing::RunCommand;
using ::elastrun::trainer::testing::TestDir;
using ::testing::HasSubstr;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

// Items of 28x28 with ink in a rectangle per item, and classes 0..9.
struct SyntheticItems {
  std::vector<uint8_t> pixels, classes;
  ItemSet set;
  explicit SyntheticItems(int count) : pixels(count * 784, 0), classes(count) {
    for (int i = 0; i < count; ++i) {
      classes[i] = static_cast<uint8_t>(i % 10);
      for (int y = 3 + i % 5; y < 20 + i % 7; ++y) {
        for (int x = 6 + i % 3; x < 14 + i % 11; ++x) {
          pixels[i * 784 + y * 28 + x] = static_cast<uint8_t>(60 + (x * y + i) % 190);
        }
      }
    }
    set = {pixels.data(), classes.data(), count, 28, 28};
  }
};

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(GenerateRenderTest, MaskBoxIsTheExtentOfTheDrawnPixels) {
  SyntheticItems items(7);
  for (int i = 0; i < 7; ++i) {
    for (const auto& [w, h] :
         std::vector<std::pair<int, int>>{{24, 24}, {61, 37}, {9, 80}}) {
      const ItemMask mask = ScaleItem(items.pixels.data() + i * 784, 28, 28, w, h);
      ASSERT_FALSE(mask.empty());
      Image canvas(w + 10, h + 10);  // black; the item in white
      const uint8_t white[3] = {255, 255, 255};
      DrawItem(mask, 5, 5, white, &canvas);
      int x0 = canvas.width, y0 = canvas.height, x1 = -1, y1 = -1;
      for (int y = 0; y < canvas.height; ++y) {
        for (int x = 0; x < canvas.width; ++x) {
          if (canvas.at(x, y)[0] == 0) continue;
          x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y),
          y1 = std::max(y1, y);
        }
      }
      EXPECT_EQ(x0, mask.x0 + 5) << i << " " << w << "x" << h;
      EXPECT_EQ(x1, mask.x1 + 5);
      EXPECT_EQ(y0, mask.y0 + 5);
      EXPECT_EQ(y1, mask.y1 + 5);
      // The inked part fills the whole scaled size, give or take a pixel.
      EXPECT_LE(mask.x0, 1);
      EXPECT_GE(mask.x1, w - 2);
    }
  }
  std::vector<uint8_t> blank(784, kInkThreshold);
  EXPECT_TRUE(ScaleItem(blank.data(), 28, 28, 30, 30).empty());
}

TEST(GenerateRenderTest, ImagesAreAFunctionOfSeedSplitAndIndex) {
  SyntheticItems items(50);
  RenderOptions options;
  options.image_size = 128;
  const RenderedImage a = RenderImage(items.set, options, 7, 0, 3);
  const RenderedImage b = RenderImage(items.set, options, 7, 0, 3);
  EXPECT_EQ(a.image.pixels, b.image.pixels);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(RenderImage(items.set, options, 8, 0, 3).image.pixels, a.image.pixels);
  EXPECT_NE(RenderImage(items.set, options, 7, 1, 3).image.pixels, a.image.pixels);
  EXPECT_NE(RenderImage(items.set, options, 7, 0, 4).image.pixels, a.image.pixels);
  int objects = 0;
  for (int i = 0; i < 40; ++i) {
    const RenderedImage r = RenderImage(items.set, options, 1, 0, i);
    EXPECT_LE(r.labels.size(), 6u);
    objects += static_cast<int>(r.labels.size());
    for (const Label& l : r.labels) {
      EXPECT_GE(l.cx - l.w / 2, 0);
      EXPECT_LE(l.cx + l.w / 2, 1 + 1e-6);
      EXPECT_GE(l.cy - l.h / 2, 0);
      EXPECT_LE(l.cy + l.h / 2, 1 + 1e-6);
      EXPECT_GE(std::max(l.w, l.h) * 128, 24 * 0.7);  // the longer side, less the stretch
    }
  }
  EXPECT_GT(objects, 80);  // 1-6 per image, few placements fail
}

TEST(GenerateOptionsTest, BadOptionsNameTheFlag) {
  GenerateOptions o;
  o.render.image_size = 16;
  EXPECT_THAT(CheckGenerateOptions(o).message(),
              HasSubstr("--size: 16 is not in 32-8192"));
  o = GenerateOptions();
  o.train_images = o.val_images = 0;
  EXPECT_THAT(CheckGenerateOptions(o).message(), HasSubstr("not both 0"));
  o = GenerateOptions();
  o.render.min_objects = 4;
  o.render.max_objects = 2;
  EXPECT_THAT(CheckGenerateOptions(o).message(), HasSubstr("--objects 4:2"));
  o = GenerateOptions();
  o.render.min_object_size = 300;
  o.render.max_object_size = 400;
  EXPECT_THAT(CheckGenerateOptions(o).message(), HasSubstr("MIN <= --size (256)"));
  o = GenerateOptions();
  o.format = ImageFormat::kGif;
  EXPECT_THAT(CheckGenerateOptions(o).message(),
              HasSubstr("--format: GIF is not jpg or png"));
  o = GenerateOptions();
  o.jpeg_quality = 101;
  EXPECT_THAT(CheckGenerateOptions(o).message(), HasSubstr("--quality: 101"));
  EXPECT_TRUE(CheckGenerateOptions(GenerateOptions()).ok());
}

class GenerateDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kFashionMnist)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  }
  static GenerateOptions Small(const std::string& out) {
    GenerateOptions o;
    o.out_dir = out;
    o.train_images = 24;
    o.val_images = 8;
    o.render.image_size = 96;
    o.render.min_object_size = 16;
    o.render.max_object_size = 48;
    o.seed = 5;
    return o;
  }
};

TEST_F(GenerateDatasetTest, ReaderGetsBackWhatWasDrawn) {
  const std::string dir = TestDir();
  for (ImageFormat format : {ImageFormat::kPng, ImageFormat::kJpeg}) {
    GenerateOptions o = Small(absl::StrCat(dir, "/", FormatName(format)));
    o.format = format;
    absl::StatusOr<GenerateSummary> summary = GenerateDataset(o);
    ASSERT_TRUE(summary.ok()) << summary.status();
    absl::StatusOr<Dataset> ds = LoadDataset(summary->yaml_path);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ(ds->yaml.names.size(), 10u);
    EXPECT_EQ(ds->yaml.names[9], "Ankle boot");
    EXPECT_EQ(ds->train.images.size(), 24u);
    EXPECT_EQ(ds->val.images.size(), 8u);
    EXPECT_EQ(ds->train.num_labels(), summary->train_objects);
    EXPECT_EQ(ds->val.num_labels(), summary->val_objects);
    EXPECT_EQ(ds->train.counts.corrupt + ds->val.counts.corrupt, 0);
    EXPECT_TRUE(ds->train.warnings.empty());

    auto items = trainer::ReadFashionMnist(kFashionMnist, true, 10);
    ASSERT_TRUE(items.ok());
    const ItemSet set{items->images.data.data(), items->labels.data.data(), items->size(),
                      28, 28};
    for (int i = 0; i < 24; ++i) {
      const RenderedImage drawn = RenderImage(set, o.render, o.seed, 0, i);
      const ImageEntry& read = ds->train.images[i];
      EXPECT_EQ(read.path, absl::StrFormat("%s/images/train/%06d.%s", o.out_dir, i,
                                           format == ImageFormat::kPng ? "png" : "jpg"));
      EXPECT_EQ(read.width, 96);
      ASSERT_EQ(read.labels.size(), drawn.labels.size()) << read.path;
      for (size_t k = 0; k < drawn.labels.size(); ++k) {
        const Label& a = read.labels[k];
        const Label& b = drawn.labels[k];
        EXPECT_EQ(a.cls, b.cls);
        for (auto [x, y] :
             {std::pair{a.cx, b.cx}, {a.cy, b.cy}, {a.w, b.w}, {a.h, b.h}}) {
          EXPECT_NEAR(x * 96, y * 96, 0.01) << read.path << " object " << k;
        }
      }
      absl::StatusOr<Image> pixels = ReadImage(read.path);
      ASSERT_TRUE(pixels.ok());
      if (format == ImageFormat::kPng) {
        EXPECT_EQ(pixels->pixels, drawn.image.pixels);
      }
    }
  }
}

TEST_F(GenerateDatasetTest, SameSeedSameBytesWhateverTheThreads) {
  const std::string dir = TestDir();
  GenerateOptions a = Small(dir + "/a"), b = Small(dir + "/b"), c = Small(dir + "/c");
  a.threads = 1;
  b.threads = 3;
  c.seed = 6;
  ASSERT_TRUE(GenerateDataset(a).ok());
  ASSERT_TRUE(GenerateDataset(b).ok());
  ASSERT_TRUE(GenerateDataset(c).ok());
  int files = 0, differ_from_c = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir + "/a")) {
    if (!entry.is_regular_file() || entry.path().filename() == "data.yaml") continue;
    const fs::path rel = fs::relative(entry.path(), dir + "/a");
    ++files;
    EXPECT_EQ(ReadAll(entry.path()), ReadAll(fs::path(dir + "/b") / rel)) << rel;
    differ_from_c += ReadAll(entry.path()) != ReadAll(fs::path(dir + "/c") / rel);
  }
  EXPECT_EQ(files, 64);
  EXPECT_GE(differ_from_c, 60);
  std::string yaml_a = ReadAll(dir + "/a/data.yaml"),
              yaml_b = ReadAll(dir + "/b/data.yaml");
  EXPECT_THAT(yaml_a, HasSubstr("path: '" + dir + "/a'\n"));
  EXPECT_EQ(yaml_a.replace(yaml_a.find("/a'"), 3, "/b'"), yaml_b);
}

TEST_F(GenerateDatasetTest, RefusesToMixWithAnExistingDataset) {
  const std::string dir = TestDir();
  GenerateOptions o = Small(dir);
  o.train_images = 3;
  o.val_images = 1;
  ASSERT_TRUE(GenerateDataset(o).ok());
  absl::StatusOr<GenerateSummary> again = GenerateDataset(o);
  EXPECT_TRUE(absl::IsFailedPrecondition(again.status()));
  EXPECT_THAT(again.status().message(),
              HasSubstr(dir + " already holds images, labels, data.yaml: choose another "
                              "folder, or pass --overwrite"));
  std::ofstream(dir + "/images/train/stale.jpg") << "x";
  o.overwrite = true;
  ASSERT_TRUE(GenerateDataset(o).ok());
  EXPECT_FALSE(fs::exists(dir + "/images/train/stale.jpg"));
  o.fashion_mnist_root = dir + "/none";
  EXPECT_TRUE(absl::IsNotFound(GenerateDataset(o).status()));
}

TEST_F(GenerateDatasetTest, CommandLine) {
  const std::string dir = TestDir();
  const std::string bin = ELASTRUN_DETECT_DATA_BINARY;
  int status = 0;
  std::string out = RunCommand(bin + " --help", &status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_THAT(out, HasSubstr("usage: elastrun-detect-data OUT_DIR [flags]"));
  out = RunCommand(bin + " " + dir + " --format gif", &status);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_THAT(out, HasSubstr("Run 'elastrun-detect-data --help' for usage."));
  out = RunCommand(bin + " " + dir + " --objects 3:1", &status);
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_THAT(out, HasSubstr("--objects"));
  out = RunCommand(bin + " " + dir +
                       "/ds --train 20 --val 5 --size 64 --object-size 16:32 "
                       "--seed 3 --format png --threads 2",
                   &status);
  ASSERT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_THAT(out, HasSubstr("wrote 25/25 images"));
  EXPECT_THAT(out, HasSubstr("wrote 20 train + 5 val images"));
  EXPECT_THAT(out, HasSubstr("objects per class: T-shirt/top "));
  EXPECT_THAT(out, HasSubstr("dataset: " + dir + "/ds/data.yaml"));
  EXPECT_TRUE(fs::exists(dir + "/ds/images/val/000004.png"));
  out = RunCommand(bin + " " + dir + "/ds --train 1 --val 0", &status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_THAT(out, HasSubstr("elastrun-detect-data: " + dir + "/ds already holds"));
}

}  // namespace
}  // namespace elastrun::trainer::detect
