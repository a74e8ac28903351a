#include "trainer/detect/loader.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/detect/generate.h"
#include "trainer/test_files.h"

namespace elastrun::trainer::detect {
namespace {

using ::elastrun::trainer::testing::TestDir;
using ::testing::HasSubstr;

// The generator's dataset (Fashion-MNIST items on canvases), small.
Split GeneratedTrainSplit(const std::string& dir) {
  GenerateOptions g;
  g.out_dir = dir;
  g.train_images = 24;
  g.val_images = 1;
  g.render.image_size = 96;
  g.render.min_object_size = 16;
  g.render.max_object_size = 48;
  g.threads = 1;
  absl::StatusOr<GenerateSummary> summary = GenerateDataset(g);
  EXPECT_TRUE(summary.ok()) << summary.status();
  absl::StatusOr<Dataset> dataset = LoadDataset(summary->yaml_path);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return dataset->train;
}

// A PNG of `width` x `height`, background (40, 40, 200), with a solid red
// rectangle over pixels [x1, x2) x [y1, y2), and its label.
ImageEntry RectangleImage(const std::string& path, int width, int height, int x1, int y1,
                          int x2, int y2) {
  Image im(width, height);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const bool in = x >= x1 && x < x2 && y >= y1 && y < y2;
      uint8_t* p = im.at(x, y);
      p[0] = in ? 240 : 40, p[1] = in ? 20 : 40, p[2] = in ? 20 : 200;
    }
  }
  EXPECT_TRUE(WriteFileBytes(path, *EncodeImage(im, ImageFormat::kPng)).ok());
  ImageEntry e;
  e.path = path;
  e.width = width;
  e.height = height;
  e.labels.push_back({1, (x1 + x2) / 2.0f / width, (y1 + y2) / 2.0f / height,
                      static_cast<float>(x2 - x1) / width,
                      static_cast<float>(y2 - y1) / height});
  return e;
}

Split MakeSplit(const std::string& name, std::vector<ImageEntry> images) {
  Split split;
  split.name = name;
  split.images = std::move(images);
  return split;
}

bool IsRed(const LoadedBatch& b, int image, int x, int y) {
  const size_t plane = static_cast<size_t>(b.image_size) * b.image_size;
  const size_t p = image * plane * 3 + static_cast<size_t>(y) * b.image_size + x;
  return b.pixels[p] > 140 && b.pixels[p + 2 * plane] < 110;
}

std::vector<std::vector<float>> Rows(const LoadedBatch& b) {
  std::vector<std::vector<float>> rows;
  for (size_t i = 0; i < b.targets.size(); i += 6) {
    rows.emplace_back(b.targets.begin() + i, b.targets.begin() + i + 6);
  }
  return rows;
}

LoaderOptions TrainOptions(int size) {
  LoaderOptions o;
  o.image_size = size;
  o.augment = true;
  o.hyp.mixup = 0.5;
  o.hyp.degrees = 5;
  o.hyp.flipud = 0.5;
  o.seed = 42;
  return o;
}

TEST(LoaderTest, SameBytesWhateverTheWorkersAndPrefetch) {
  const Split split = GeneratedTrainSplit(TestDir());
  std::vector<LoadedBatch> reference;
  for (const auto& [workers, prefetch] :
       std::vector<std::pair<int, int>>{{0, 2}, {1, 1}, {3, 2}, {3, 5}, {2, 3}}) {
    LoaderOptions o = TrainOptions(64);
    o.num_workers = workers;
    o.prefetch = prefetch;
    if (workers == 2) o.cache_bytes = 10 * 64 * 64 * 3;  // some images cached, not all
    auto loader = Loader::Create(split, o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    for (int b = 0; b < 4; ++b) {
      std::vector<int64_t> indices;
      for (int k = 0; k < 5; ++k) indices.push_back((b * 7 + k * 5) % 24);
      (*loader)->Enqueue(b / 2, indices);
    }
    for (int b = 0; b < 4; ++b) {
      absl::StatusOr<LoadedBatch> got = (*loader)->Next();
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->pixels.size(), 5u * 3 * 64 * 64);
      if (reference.size() < 4) {
        reference.push_back(*got);
        continue;
      }
      SCOPED_TRACE(absl::StrCat("workers ", workers, " prefetch ", prefetch, " cache ",
                                o.cache_bytes, " batch ", b));
      EXPECT_EQ(got->indices, reference[b].indices);
      EXPECT_TRUE(got->pixels == reference[b].pixels);
      EXPECT_EQ(got->targets, reference[b].targets);
    }
  }
  // Augmentation happened: labels moved, some images got objects.
  EXPECT_FALSE(reference[0].targets.empty());
}

TEST(LoaderTest, LoadOneIsTheBatchSliceWhateverCameBefore) {
  const Split split = GeneratedTrainSplit(TestDir());
  LoaderOptions o = TrainOptions(64);
  o.num_workers = 2;
  auto loader = Loader::Create(split, o);
  ASSERT_TRUE(loader.ok());
  (*loader)->Enqueue(0, {1, 2, 3});
  (*loader)->Enqueue(3, {9, 4, 17});
  (*loader)->Clear();
  EXPECT_EQ((*loader)->queued(), 0);
  (*loader)->Enqueue(3, {5, 17, 9});
  absl::StatusOr<LoadedBatch> batch = (*loader)->Next();
  ASSERT_TRUE(batch.ok()) << batch.status();
  const size_t plane = 3 * 64 * 64;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<LoadedBatch> one = (*loader)->LoadOne(3, batch->indices[i]);
    ASSERT_TRUE(one.ok());
    EXPECT_TRUE(std::equal(one->pixels.begin(), one->pixels.end(),
                           batch->pixels.begin() + i * plane));
    std::vector<std::vector<float>> want;
    for (std::vector<float> row : Rows(*batch)) {
      if (row[0] == i) row[0] = 0, want.push_back(row);
    }
    EXPECT_EQ(Rows(*one), want);
  }
  // Another epoch draws other augmentations.
  absl::StatusOr<LoadedBatch> other = (*loader)->LoadOne(4, 5);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(
      std::equal(other->pixels.begin(), other->pixels.end(), batch->pixels.begin()));
}

TEST(LoaderTest, EvalLetterboxPlacesTheImageAndItsLabel) {
  const std::string dir = TestDir();
  const Split split =
      MakeSplit("val", {RectangleImage(dir + "/a.png", 200, 100, 50, 20, 130, 70)});
  LoaderOptions o;
  o.image_size = 64;
  auto loader = Loader::Create(split, o);
  ASSERT_TRUE(loader.ok());
  absl::StatusOr<LoadedBatch> b = (*loader)->LoadOne(0, 0);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->placements.size(), 1u);
  const Placement& p = b->placements[0];
  EXPECT_FLOAT_EQ(p.gain, 0.32f);
  EXPECT_EQ(p.pad_x, 0);
  EXPECT_EQ(p.pad_y, 16);  // 200 x 100 -> 64 x 32, centred
  EXPECT_EQ(p.width, 200);
  EXPECT_EQ(p.height, 100);
  // The rectangle [50, 130) x [20, 70) -> [16, 41.6) x [22.4, 38.4).
  ASSERT_EQ(b->targets.size(), 6u);
  EXPECT_EQ(b->targets[1], 1);
  EXPECT_NEAR(b->targets[2], (50 * 0.32 + 130 * 0.32) / 2 / 64, 1e-6);
  EXPECT_NEAR(b->targets[3], (20 * 0.32 + 16 + 70 * 0.32 + 16) / 2 / 64, 1e-6);
  EXPECT_NEAR(b->targets[4], 80 * 0.32 / 64, 1e-6);
  EXPECT_NEAR(b->targets[5], 50 * 0.32 / 64, 1e-6);
  // Pixels: pad above and below, red inside, background outside.
  EXPECT_EQ(b->pixels[5 * 64 + 30], 114);
  EXPECT_EQ(b->pixels[60 * 64 + 30], 114);
  EXPECT_TRUE(IsRed(*b, 0, 28, 30));
  EXPECT_FALSE(IsRed(*b, 0, 10, 30));
  EXPECT_FALSE(IsRed(*b, 0, 45, 30));
}

// Every red blob (a rectangle as augmented) lies in a label box (within
// 2 px), and every box is tight around one blob (within 3 px): the labels
// moved with the pixels. Blobs outside every box add their pixels to
// `uncovered`.
void ExpectBoxesFitRectangles(const LoadedBatch& b, int image, int* uncovered, int* red) {
  const int s = b.image_size;
  std::vector<std::array<double, 4>> boxes;
  for (const std::vector<float>& row : Rows(b)) {
    if (row[0] != image) continue;
    boxes.push_back({(row[2] - row[4] / 2) * s, (row[3] - row[5] / 2) * s,
                     (row[2] + row[4] / 2) * s, (row[3] + row[5] / 2) * s});
  }
  // Blobs: 8-connected red pixels, each as its extent and pixel count.
  std::vector<int> seen(static_cast<size_t>(s) * s, 0);
  std::vector<std::array<double, 4>> blobs;
  std::vector<int> sizes;
  for (int y0 = 0; y0 < s; ++y0) {
    for (int x0 = 0; x0 < s; ++x0) {
      if (seen[y0 * s + x0] || !IsRed(b, image, x0, y0)) continue;
      std::array<double, 4> e = {1e9, 1e9, -1e9, -1e9};
      int count = 0;
      std::vector<std::pair<int, int>> stack = {{x0, y0}};
      seen[y0 * s + x0] = 1;
      while (!stack.empty()) {
        const auto [x, y] = stack.back();
        stack.pop_back();
        ++count;
        e = {std::min<double>(e[0], x), std::min<double>(e[1], y),
             std::max<double>(e[2], x + 1), std::max<double>(e[3], y + 1)};
        for (int dy = -1; dy <= 1; ++dy) {
          for (int dx = -1; dx <= 1; ++dx) {
            const int u = x + dx, v = y + dy;
            if (u < 0 || v < 0 || u >= s || v >= s || seen[v * s + u]) continue;
            if (!IsRed(b, image, u, v)) continue;
            seen[v * s + u] = 1;
            stack.push_back({u, v});
          }
        }
      }
      blobs.push_back(e);
      sizes.push_back(count);
      *red += count;
    }
  }
  for (size_t k = 0; k < blobs.size(); ++k) {
    const auto& e = blobs[k];
    const bool in = std::any_of(boxes.begin(), boxes.end(), [&](const auto& q) {
      return e[0] >= q[0] - 2 && e[1] >= q[1] - 2 && e[2] <= q[2] + 2 && e[3] <= q[3] + 2;
    });
    if (!in) *uncovered += sizes[k];
  }
  for (size_t k = 0; k < boxes.size(); ++k) {
    const auto& q = boxes[k];
    const bool tight = std::any_of(blobs.begin(), blobs.end(), [&](const auto& e) {
      for (int j = 0; j < 4; ++j) {
        if (std::abs(e[j] - q[j]) > 3) return false;
      }
      return true;
    });
    EXPECT_TRUE(tight) << "image " << image << ": box " << q[0] << ", " << q[1] << ", "
                       << q[2] << ", " << q[3] << " has no red blob that fits it";
  }
}

TEST(LoaderTest, AugmentedLabelsStillEncloseTheirRectangles) {
  const std::string dir = TestDir();
  const Split split =
      MakeSplit("train", {RectangleImage(dir + "/a.png", 160, 120, 40, 30, 110, 80),
                          RectangleImage(dir + "/b.png", 100, 140, 20, 50, 70, 90),
                          RectangleImage(dir + "/c.png", 128, 128, 60, 10, 100, 110)});
  for (const bool mosaic : {false, true}) {
    SCOPED_TRACE(mosaic ? "mosaic" : "single image");
    LoaderOptions o;
    o.image_size = 96;
    o.augment = true;
    o.hyp.hsv_h = o.hyp.hsv_s = o.hyp.hsv_v = 0;  // keep red red
    o.hyp.mosaic = mosaic ? 1 : 0;
    o.hyp.degrees = 20;
    o.hyp.shear = 5;
    o.hyp.perspective = 0.0005;
    o.hyp.scale = 0.3;
    o.hyp.flipud = 0.5;
    o.hyp.fliplr = 0.5;
    auto loader = Loader::Create(split, o);
    ASSERT_TRUE(loader.ok());
    int uncovered = 0, red = 0;
    for (int64_t epoch = 0; epoch < 12; ++epoch) {
      (*loader)->Enqueue(epoch, {0, 1, 2});
      absl::StatusOr<LoadedBatch> b = (*loader)->Next();
      ASSERT_TRUE(b.ok()) << b.status();
      for (int i = 0; i < 3; ++i) ExpectBoxesFitRectangles(*b, i, &uncovered, &red);
    }
    EXPECT_GT(red, 1000);
    // Only slivers that box_candidates drops (a mosaic's crops, the frame's
    // edge) have red pixels outside every box.
    EXPECT_LE(uncovered, red / 50);
  }
}

TEST(LoaderTest, FlipLeftRightMirrorsPixelsAndCx) {
  const Split split = GeneratedTrainSplit(TestDir());
  LoaderOptions o;
  o.image_size = 64;
  o.augment = true;
  o.hyp.mosaic = 0;
  o.hyp.fliplr = 0;
  auto plain = Loader::Create(split, o);
  o.hyp.fliplr = 1;
  auto flipped = Loader::Create(split, o);
  ASSERT_TRUE(plain.ok() && flipped.ok());
  absl::StatusOr<LoadedBatch> a = (*plain)->LoadOne(2, 7), b = (*flipped)->LoadOne(2, 7);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 64; ++y) {
      for (int x = 0; x < 64; ++x) {
        ASSERT_EQ(b->pixels[(c * 64 + y) * 64 + x],
                  a->pixels[(c * 64 + y) * 64 + 63 - x]);
      }
    }
  }
  ASSERT_EQ(a->targets.size(), b->targets.size());
  ASSERT_FALSE(a->targets.empty());
  for (size_t i = 0; i < a->targets.size(); i += 6) {
    EXPECT_FLOAT_EQ(b->targets[i + 2], 1 - a->targets[i + 2]);
    EXPECT_EQ(b->targets[i + 3], a->targets[i + 3]);
  }
}

TEST(LoaderTest, CorruptImageIsAnErrorNamingItsFile) {
  const std::string dir = TestDir();
  Split split =
      MakeSplit("train", {RectangleImage(dir + "/good.png", 64, 64, 10, 10, 30, 30)});
  ImageEntry bad = split.images[0];
  bad.path = dir + "/bad.jpg";
  ASSERT_TRUE(
      WriteFileBytes(bad.path, std::string("\xff\xd8\xff\xe0 not really a jpeg")).ok());
  split.images.push_back(bad);
  for (const int workers : {0, 2}) {
    LoaderOptions o = TrainOptions(64);
    o.num_workers = workers;
    auto loader = Loader::Create(split, o);
    ASSERT_TRUE(loader.ok());
    (*loader)->Enqueue(0, {0, 1});
    absl::StatusOr<LoadedBatch> b = (*loader)->Next();
    ASSERT_FALSE(b.ok());
    EXPECT_THAT(b.status().message(), HasSubstr(bad.path));
    EXPECT_EQ((*loader)->queued(), 0);
  }
}

TEST(LoaderTest, BadOptionsAndCallsAreErrors) {
  const std::string dir = TestDir();
  const Split split =
      MakeSplit("train", {RectangleImage(dir + "/a.png", 40, 40, 10, 10, 30, 30)});
  LoaderOptions o;
  o.image_size = 16;
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(split, o);
  EXPECT_EQ(loader.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loader.status().message(), HasSubstr("image_size"));
  o = LoaderOptions();
  o.hyp.flipud = -0.1;
  loader = Loader::Create(split, o);
  EXPECT_EQ(loader.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loader.status().message(), HasSubstr("hyp.flipud"));
  o = LoaderOptions();
  o.prefetch = 0;
  EXPECT_THAT(Loader::Create(split, o).status().message(), HasSubstr("prefetch"));
  EXPECT_EQ(Loader::Create(Split(), LoaderOptions()).status().code(),
            absl::StatusCode::kFailedPrecondition);

  loader = Loader::Create(split, LoaderOptions());
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ((*loader)->Next().status().code(), absl::StatusCode::kFailedPrecondition);
  (*loader)->Enqueue(0, {0, 1});
  EXPECT_EQ((*loader)->Next().status().code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace elastrun::trainer::detect
