// The COCO JSON writers: read back by Python's json as a COCO tool reads
// them (ids, categories, bbox as x, y, width, height), and their errors.
#include "trainer/detect/coco.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trainer/detect/metrics_test_util.h"
#include "trainer/test_files.h"

namespace elastrun::trainer::detect {
namespace {

using ::elastrun::trainer::detect::testing::RunPythonReference;

// Reads the two files as COCO's loaders do and turns each annotation back
// into (image_id, class by category name, x1, y1, x2, y2) and each result
// into (image_id, category_id, x1, y1, x2, y2, score).
const char kReadBack[] = R"(
gt, dt = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
images = {im['id']: im for im in gt['images']}
names = {c['id']: c['name'] for c in gt['categories']}
order = sys.argv[4].split(',')
emit(f, np.array([len(images), len(gt['annotations']), len(names), len(dt)]))
for a in gt['annotations']:
  assert a['image_id'] in images and a['category_id'] in names and a['iscrowd'] == 0
  x, y, w, h = a['bbox']
  assert abs(a['area'] - w * h) < 1e-9
  emit(f, np.array([a['image_id'], order.index(names[a['category_id']]), x, y, x + w, y + h]))
for d in dt:
  x, y, w, h = d['bbox']
  emit(f, np.array([d['image_id'], d['category_id'], x, y, x + w, y + h, d['score']]))
)";

CocoBox RandomBox(int64_t image_id, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  CocoBox b;
  b.image_id = image_id;
  b.cls = static_cast<int64_t>(3 * u(rng));
  b.x1 = 600 * u(rng), b.y1 = 400 * u(rng);
  b.x2 = b.x1 + 40 * u(rng), b.y2 = b.y1 + 40 * u(rng);
  b.score = u(rng);
  return b;
}

TEST(CocoJsonTest, ReadsBackAsCoco) {
  std::mt19937 rng(8);
  const std::vector<std::string> names = {"shirt", "bag", "ankle boot"};
  std::vector<CocoImage> images;
  std::vector<CocoBox> labels, detections;
  for (int64_t id = 10; id < 20; ++id) {
    images.push_back({id, absl::StrCat("im", id, ".png"), 640, 480});
    for (int k = static_cast<int>(id % 4); k > 0; --k)
      labels.push_back(RandomBox(id, rng));
    for (int k = static_cast<int>(id % 5); k > 0; --k)
      detections.push_back(RandomBox(id, rng));
  }
  auto gt = CocoInstancesJson(images, labels, names);
  auto dt = CocoResultsJson(detections, 3);
  ASSERT_TRUE(gt.ok()) << gt.status();
  ASSERT_TRUE(dt.ok()) << dt.status();
  // Beside the test's folder, which RunPythonReference empties.
  const std::string dir = elastrun::trainer::testing::TestDir() + "_json";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/gt.json") << *gt;
  std::ofstream(dir + "/dt.json") << *dt;
  // RunPythonReference passes its own output file first; these follow it.
  auto out =
      RunPythonReference("import json, numpy as np\nsys.argv += ['" + dir +
                             "/gt.json', '" + dir + "/dt.json', 'shirt,bag,ankle boot']",
                         kReadBack);
  if (!out) GTEST_SKIP() << "/usr/bin/python3 with numpy is not available";
  ASSERT_EQ(out->size(), 1 + labels.size() + detections.size());
  EXPECT_EQ((*out)[0], (std::vector<double>{10, static_cast<double>(labels.size()), 3,
                                            static_cast<double>(detections.size())}));
  for (size_t i = 0; i < labels.size(); ++i) {
    const CocoBox& b = labels[i];
    const std::vector<double>& got = (*out)[1 + i];
    ASSERT_EQ(got.size(), 6u);
    EXPECT_EQ(got[0], b.image_id);
    EXPECT_EQ(got[1], b.cls);
    EXPECT_EQ(got[2], b.x1);
    EXPECT_EQ(got[3], b.y1);
    EXPECT_NEAR(got[4], b.x2, 1e-9);
    EXPECT_NEAR(got[5], b.y2, 1e-9);
  }
  for (size_t i = 0; i < detections.size(); ++i) {
    const CocoBox& d = detections[i];
    const std::vector<double>& got = (*out)[1 + labels.size() + i];
    ASSERT_EQ(got.size(), 7u);
    EXPECT_EQ(got[0], d.image_id);
    EXPECT_EQ(got[1], d.cls + 1);  // COCO's ids start at 1
    for (int k = 0; k < 4; ++k) {
      EXPECT_NEAR(got[2 + k], (std::vector<double>{d.x1, d.y1, d.x2, d.y2})[k], 1.1e-3);
    }
    EXPECT_NEAR(got[6], d.score, 5e-6);
  }
}

TEST(CocoJsonTest, CategoryOffsetAndEmptySets) {
  CocoOptions o;
  o.category_id_offset = 0;
  auto gt = CocoInstancesJson({}, {}, {"only"}, o);
  ASSERT_TRUE(gt.ok()) << gt.status();
  EXPECT_NE(gt->find(R"("categories":[{"id":0,"name":"only")"), std::string::npos) << *gt;
  auto dt = CocoResultsJson({}, 1);
  ASSERT_TRUE(dt.ok());
  EXPECT_EQ(*dt, "[]");
}

TEST(CocoJsonTest, ErrorsNameTheOffender) {
  const std::vector<CocoImage> images = {{1, "a.png", 64, 64}};
  CocoBox b;
  b.image_id = 1, b.x2 = 2, b.y2 = 2;
  EXPECT_TRUE(CocoInstancesJson(images, {b}, {"x"}).ok());
  EXPECT_FALSE(CocoInstancesJson(images, {b}, {}).ok());  // no names
  CocoBox other = b;
  other.image_id = 2;
  auto unknown = CocoInstancesJson(images, {other}, {"x"});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("image 2"), std::string::npos);
  CocoBox inverted = b;
  inverted.x1 = 3;
  EXPECT_FALSE(CocoInstancesJson(images, {inverted}, {"x"}).ok());
  CocoBox bad_class = b;
  bad_class.cls = 1;
  EXPECT_FALSE(CocoResultsJson({bad_class}, 1).ok());
  CocoBox nan_score = b;
  nan_score.score = NAN;
  EXPECT_FALSE(CocoResultsJson({nan_score}, 1).ok());
  EXPECT_FALSE(CocoInstancesJson({images[0], images[0]}, {}, {"x"}).ok());  // id twice
  EXPECT_FALSE(CocoInstancesJson({{3, "b.png", 0, 10}}, {}, {"x"}).ok());   // no size
  EXPECT_FALSE(CocoResultsJson({}, 0).ok());
}

}  // namespace
}  // namespace elastrun::trainer::detect
