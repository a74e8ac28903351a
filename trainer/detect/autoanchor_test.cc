// AutoAnchor: the metric against a Python transcription of YOLOv5's, the
// k-means + genetic search on realistic and degenerate boxes, the order
// check, and the errors.
#include "trainer/detect/autoanchor.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/test_files.h"

namespace elastrun::trainer::detect {
namespace {

using ::elastrun::trainer::testing::RunCommand;
using ::elastrun::trainer::testing::TestDir;
using ::testing::HasSubstr;

// YOLOv5's default anchors (models/yolov5s.yaml) for strides 8, 16, 32.
const std::vector<BoxSize> kDefaultAnchors = {{10, 13},  {16, 30},   {33, 23},
                                              {30, 61},  {62, 45},   {59, 119},
                                              {116, 90}, {156, 198}, {373, 326}};
const std::vector<double> kStrides = {8, 16, 32};

// Uniform in [0, 1) from the engine's bits, the same on every machine.
double Uniform(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// `count` images of 1 to 6 boxes, each side log-uniform in [lo, hi] px.
std::vector<std::vector<BoxSize>> Images(int count, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<BoxSize>> images(count);
  for (auto& image : images) {
    const int boxes = 1 + static_cast<int>(Uniform(rng) * 6);
    for (int i = 0; i < boxes; ++i) {
      image.push_back(
          {lo * std::pow(hi / lo, Uniform(rng)), lo * std::pow(hi / lo, Uniform(rng))});
    }
  }
  return images;
}

std::vector<BoxSize> Flat(const std::vector<std::vector<BoxSize>>& images) {
  std::vector<BoxSize> all;
  for (const auto& image : images) all.insert(all.end(), image.begin(), image.end());
  return all;
}

bool SortedByArea(const std::vector<BoxSize>& anchors) {
  for (size_t i = 1; i < anchors.size(); ++i) {
    if (anchors[i - 1].w * anchors[i - 1].h > anchors[i].w * anchors[i].h) return false;
  }
  return true;
}

std::string PythonList(const std::vector<BoxSize>& boxes) {
  std::string s = "[";
  for (const BoxSize& b : boxes) absl::StrAppendFormat(&s, "[%.17g,%.17g],", b.w, b.h);
  return s + "]";
}

// ------------------------------------------------------------- the metric

TEST(AnchorFitTest, EqualsPythonTranscriptionOfYolov5Metric) {
  if (!std::filesystem::exists("/usr/bin/python3")) {
    GTEST_SKIP() << "/usr/bin/python3 (with numpy and torch) is not installed";
  }
  struct Case {
    std::vector<BoxSize> boxes, anchors;
    double thr;
  };
  std::vector<Case> cases;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed);
    Case c;
    c.boxes = Flat(Images(300, 1, 300, seed));
    c.boxes.push_back({0, 40});   // a zero side: x = 0 for every anchor
    c.boxes.push_back({1.5, 1});  // tiny: counted, not filtered, by the metric
    const int anchors = 1 + static_cast<int>(Uniform(rng) * 12);
    for (int j = 0; j < anchors; ++j) {
      c.anchors.push_back({2 + Uniform(rng) * 300, 2 + Uniform(rng) * 300});
    }
    c.thr = seed % 2 ? 4.0 : 2.0 + Uniform(rng) * 4;
    cases.push_back(c);
  }
  cases.push_back({Flat(Images(200, 8, 200, 7)), kDefaultAnchors, 4.0});

  // YOLOv5's check_anchors metric, transcribed, in float64.
  std::string script =
      "import torch\n"
      "def metric(wh, k, thr):\n"
      "    r = wh[:, None] / k[None]\n"
      "    x = torch.min(r, 1 / r).min(2)[0]\n"
      "    best = x.max(1)[0]\n"
      "    aat = (x > 1 / thr).double().sum(1).mean()\n"
      "    bpr = (best > 1 / thr).double().mean()\n"
      "    return bpr, aat\n"
      "with open(OUT, 'w') as f:\n"
      "    for wh, k, thr in CASES:\n"
      "        bpr, aat = metric(torch.tensor(wh, dtype=torch.float64),\n"
      "                          torch.tensor(k, dtype=torch.float64), thr)\n"
      "        f.write('%r %r\\n' % (bpr.item(), aat.item()))\n";
  std::string case_list = "CASES = [";
  for (const Case& c : cases) {
    absl::StrAppendFormat(&case_list, "(%s, %s, %.17g),\n", PythonList(c.boxes),
                          PythonList(c.anchors), c.thr);
  }
  const std::string dir = TestDir();
  const std::string out_path = dir + "/fit.txt";
  std::ofstream(dir + "/ref.py") << "OUT = '" << out_path << "'\n"
                                 << case_list << "]\n"
                                 << script;
  int status = 0;
  const std::string output = RunCommand("/usr/bin/python3 " + dir + "/ref.py", &status);
  if (output.find("No module named") != std::string::npos) {
    GTEST_SKIP() << "/usr/bin/python3 lacks torch: " << output;
  }
  ASSERT_EQ(status, 0) << output;

  std::ifstream lines(out_path);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("case ", i));
    double want_bpr = -1, want_aat = -1;
    ASSERT_TRUE(lines >> want_bpr >> want_aat);
    absl::StatusOr<AnchorFit> fit =
        ComputeAnchorFit(cases[i].boxes, cases[i].anchors, cases[i].thr);
    ASSERT_TRUE(fit.ok()) << fit.status();
    EXPECT_NEAR(fit->bpr, want_bpr, 1e-12);
    EXPECT_NEAR(fit->aat, want_aat, 1e-12);
  }
}

TEST(AnchorFitTest, CountsWhatPassesTheRatio) {
  // 40x40 against 10x10 (4x: not above 1/4), 11x11 (within), 200x40 (5x).
  absl::StatusOr<AnchorFit> fit =
      ComputeAnchorFit({{40, 40}, {10, 10}}, {{10, 10}, {11, 11}, {200, 40}}, 4.0);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_DOUBLE_EQ(fit->bpr, 1.0);
  EXPECT_DOUBLE_EQ(fit->aat, (1 + 2) / 2.0);  // 40x40: 11x11; 10x10: 10x10, 11x11
}

TEST(AnchorFitTest, RejectsWhatHasNoFit) {
  EXPECT_THAT(ComputeAnchorFit({}, kDefaultAnchors, 4).status().message(),
              HasSubstr("no labels"));
  EXPECT_THAT(ComputeAnchorFit({{1, 1}}, {}, 4).status().message(),
              HasSubstr("no anchors"));
  EXPECT_THAT(ComputeAnchorFit({{1, 1}, {-1, 2}}, kDefaultAnchors, 4).status().message(),
              HasSubstr("label 1 has size -1x2"));
  EXPECT_THAT(ComputeAnchorFit({{1, 1}}, {{0, 2}}, 4).status().message(),
              HasSubstr("anchor 0 is 0x2"));
  EXPECT_THAT(ComputeAnchorFit({{1, 1}}, {{1, 2}}, 1).status().message(),
              HasSubstr("anchor_t"));
}

TEST(LabelSizesTest, ScalesTheLongerSideToTheTrainingSize) {
  absl::StatusOr<std::vector<BoxSize>> sizes =
      LabelSizesAtTrainingSize({{0.5, 0.5}, {0.1, 1}}, 640, 480, 320);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  ASSERT_EQ(sizes->size(), 2u);
  EXPECT_DOUBLE_EQ((*sizes)[0].w, 160);
  EXPECT_DOUBLE_EQ((*sizes)[0].h, 120);
  EXPECT_DOUBLE_EQ((*sizes)[1].w, 32);
  EXPECT_DOUBLE_EQ((*sizes)[1].h, 240);
  EXPECT_FALSE(LabelSizesAtTrainingSize({}, 0, 480, 320).ok());
}

// --------------------------------------------------- k-means and evolution

AutoAnchorOptions Options320(uint64_t seed = 0) {
  AutoAnchorOptions o;
  o.image_size = 320;
  o.seed = seed;
  return o;
}

TEST(CheckAnchorsTest, KeepsAnchorsThatFit) {
  const auto images = Images(300, 12, 300, 1);
  absl::StatusOr<AutoAnchorResult> r =
      CheckAnchors(images, kDefaultAnchors, kStrides, Options320());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(r->old_fit.bpr, 0.98);
  EXPECT_FALSE(r->replaced);
  EXPECT_TRUE(r->new_anchors.empty());
  EXPECT_EQ(r->anchors.size(), kDefaultAnchors.size());
  EXPECT_THAT(r->message, HasSubstr("Current anchors are a good fit to dataset"));
  EXPECT_THAT(r->message, HasSubstr("Best Possible Recall (BPR)"));
}

TEST(CheckAnchorsTest, ImprovesBadAnchorsOnRealisticBoxes) {
  // Boxes 16-128 px (on 320 px images) against anchors of 3-4 px.
  const auto images = Images(500, 16, 128, 2);
  const std::vector<BoxSize> bad = {{3, 3}, {3, 4}, {4, 3}, {3, 3}, {3, 4},
                                    {4, 3}, {4, 4}, {3, 3}, {4, 4}};
  absl::StatusOr<AutoAnchorResult> r = CheckAnchors(images, bad, kStrides, Options320(3));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->old_fit.bpr, 0);
  EXPECT_TRUE(r->replaced);
  EXPECT_GE(r->new_fit.bpr, 0.98);
  EXPECT_GT(r->new_fit.aat, 1);
  ASSERT_EQ(r->new_anchors.size(), 9u);
  EXPECT_TRUE(SortedByArea(r->new_anchors));
  EXPECT_FALSE(r->reversed);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(r->anchors[i].w, r->new_anchors[i].w);
    EXPECT_EQ(r->anchors[i].h, r->new_anchors[i].h);
  }
  EXPECT_THAT(
      r->message,
      HasSubstr("Anchors are a poor fit, attempting to improve... new anchors: "));
  EXPECT_THAT(r->message, HasSubstr("replaced"));
  EXPECT_TRUE(r->warnings.empty()) << r->warnings[0];
}

TEST(CheckAnchorsTest, NeverAcceptsWorseAnchors) {
  // good_bpr above 1 forces the search; anchors that recall every box
  // cannot be beaten, so they stay.
  const auto images = Images(200, 20, 60, 4);
  AutoAnchorOptions o = Options320();
  o.good_bpr = 1.01;
  o.generations = 100;
  absl::StatusOr<AutoAnchorResult> r = CheckAnchors(images, kDefaultAnchors, kStrides, o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->old_fit.bpr, 1.0);
  EXPECT_FALSE(r->replaced);
  EXPECT_EQ(r->new_anchors.size(), 9u);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(r->anchors[i].w, kDefaultAnchors[i].w);
    EXPECT_EQ(r->anchors[i].h, kDefaultAnchors[i].h);
  }
  EXPECT_THAT(r->message, HasSubstr("no better, keeping the current anchors"));

  // And over seeds and box spreads: replaced only with a higher BPR.
  for (uint64_t seed = 0; seed < 4; ++seed) {
    const auto wide = Images(200, 2, 320, seed);
    AutoAnchorOptions w = Options320(seed);
    w.generations = 200;
    absl::StatusOr<AutoAnchorResult> s = CheckAnchors(wide, kDefaultAnchors, kStrides, w);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->replaced, s->new_fit.bpr > s->old_fit.bpr) << s->message;
  }
}

TEST(KMeansAnchorsTest, GeneticRefinementNeverLowersFitness) {
  const std::vector<BoxSize> boxes = Flat(Images(300, 10, 200, 5));
  AutoAnchorOptions o = Options320(5);
  o.generations = 0;
  absl::StatusOr<KMeansAnchors> start = ComputeKMeansAnchors(boxes, 9, o);
  o.generations = 300;
  absl::StatusOr<KMeansAnchors> evolved = ComputeKMeansAnchors(boxes, 9, o);
  ASSERT_TRUE(start.ok() && evolved.ok());
  EXPECT_GE(evolved->fitness, start->fitness);
  EXPECT_TRUE(SortedByArea(evolved->anchors));
  EXPECT_FALSE(evolved->random_init);
}

TEST(KMeansAnchorsTest, SameSeedSameAnchorsBitForBit) {
  const std::vector<BoxSize> boxes = Flat(Images(300, 8, 250, 6));
  AutoAnchorOptions o = Options320(42);
  o.generations = 200;
  absl::StatusOr<KMeansAnchors> a = ComputeKMeansAnchors(boxes, 9, o);
  absl::StatusOr<KMeansAnchors> b = ComputeKMeansAnchors(boxes, 9, o);
  o.seed = 43;
  absl::StatusOr<KMeansAnchors> c = ComputeKMeansAnchors(boxes, 9, o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  bool differs = false;
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(a->anchors[i].w, b->anchors[i].w);
    EXPECT_EQ(a->anchors[i].h, b->anchors[i].h);
    differs = differs || a->anchors[i].w != c->anchors[i].w ||
              a->anchors[i].h != c->anchors[i].h;
  }
  EXPECT_EQ(a->fitness, b->fitness);
  EXPECT_TRUE(differs) << "another seed found the very same anchors";
}

// The draws are this library's own and the library is built without
// fused multiply-adds, so a seed gives these bits on every IEEE-754
// machine and compiler; a change here changes every run's anchors.
TEST(KMeansAnchorsTest, SeedGivesTheSameAnchorsOnEveryMachine) {
  AutoAnchorOptions o = Options320(7);
  o.generations = 50;
  o.kmeans_restarts = 3;
  std::mt19937_64 rng(8);  // boxes uniform in 8-200 px: no libm on the way
  std::vector<BoxSize> boxes(300);
  for (BoxSize& b : boxes) b = {8 + 192 * Uniform(rng), 8 + 192 * Uniform(rng)};
  absl::StatusOr<KMeansAnchors> k = ComputeKMeansAnchors(boxes, 3, o);
  ASSERT_TRUE(k.ok()) << k.status();
  std::string got;
  for (const BoxSize& a : k->anchors) absl::StrAppendFormat(&got, "%a,%a ", a.w, a.h);
  EXPECT_EQ(got,
            "0x1.9c9fa54eba8c3p+6,0x1.65e74fb6fb2bap+5 "
            "0x1.7ab378834766fp+5,0x1.13cdc2e3d7033p+7 "
            "0x1.22b94e6f23de6p+7,0x1.01c253a5cfba1p+7 ");
}

// ------------------------------------------------------------- edge cases

TEST(CheckAnchorsTest, NoLabelsIsAnError) {
  const std::vector<std::vector<BoxSize>> empty_images(3);
  absl::StatusOr<AutoAnchorResult> r =
      CheckAnchors(empty_images, kDefaultAnchors, kStrides, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("no labels in the 3 training images"));
  EXPECT_THAT(ComputeKMeansAnchors({}, 9, {}).status().message(), HasSubstr("no labels"));
}

TEST(CheckAnchorsTest, FewerLabelsThanAnchorsWarnsAndReturns) {
  const std::vector<std::vector<BoxSize>> images = {{{50, 60}, {80, 40}}, {{200, 150}}};
  const std::vector<BoxSize> bad(9, BoxSize{3, 3});
  absl::StatusOr<AutoAnchorResult> r = CheckAnchors(images, bad, kStrides, Options320());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_THAT(r->warnings[0],
              HasSubstr("switching strategies from kmeans to random init: "
                        "3 labels are fewer than 9 anchors"));
  EXPECT_EQ(r->new_anchors.size(), 9u);
  EXPECT_TRUE(r->replaced);
  EXPECT_EQ(r->new_fit.bpr, 1.0);
}

TEST(CheckAnchorsTest, AllEqualBoxes) {
  // One size only: k-means cannot make 9 clusters and falls back to random
  // anchors, which evolve towards the boxes.
  const std::vector<BoxSize> bad(9, BoxSize{3, 3});
  const std::vector<std::vector<BoxSize>> squares(100, {{50, 50}, {50, 50}});
  absl::StatusOr<AutoAnchorResult> r = CheckAnchors(squares, bad, kStrides, Options320());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->old_fit.bpr, 0);
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_THAT(r->warnings[0],
              HasSubstr("k-means found fewer than 9 clusters in 200 labels"));
  EXPECT_TRUE(r->replaced);
  EXPECT_EQ(r->new_fit.bpr, 1.0);

  // Random anchors are near-square (sorted draws paired up), so none fits
  // 300x20 boxes; with no box fitted the fitness is 0 everywhere and the
  // mutations find no way up (YOLOv5's too): nothing better, nothing taken.
  const std::vector<std::vector<BoxSize>> bars(100, {{300, 20}, {300, 20}});
  r = CheckAnchors(bars, kDefaultAnchors, kStrides, Options320());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->old_fit.bpr, 0);
  EXPECT_EQ(r->warnings.size(), 1u);
  EXPECT_FALSE(r->replaced);
  EXPECT_EQ(r->anchors[0].w, kDefaultAnchors[0].w);
  for (const BoxSize& a : r->new_anchors)
    EXPECT_TRUE(std::isfinite(a.w) && a.w >= 2 && a.h >= 2);

  // The same boxes where the anchors already fit them.
  const std::vector<std::vector<BoxSize>> fitting(100, {{30, 60}});
  r = CheckAnchors(fitting, kDefaultAnchors, kStrides, Options320());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->replaced);
  EXPECT_EQ(r->old_fit.bpr, 1.0);
}

TEST(KMeansAnchorsTest, FiltersAndCountsTinyBoxes) {
  std::vector<BoxSize> boxes = Flat(Images(100, 10, 100, 9));
  const size_t big = boxes.size();
  boxes.push_back({1, 1});     // dropped (no side >= 2), counted (< 3)
  boxes.push_back({2.5, 50});  // kept, counted
  boxes.push_back({1, 1.5});   // dropped, counted
  absl::StatusOr<KMeansAnchors> k = ComputeKMeansAnchors(boxes, 9, Options320());
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_EQ(k->warnings.size(), 1u);
  EXPECT_THAT(k->warnings[0],
              HasSubstr(absl::StrCat("Extremely small objects found: 3 of ", big + 3,
                                     " labels are < 3 pixels in size")));

  absl::StatusOr<KMeansAnchors> none =
      ComputeKMeansAnchors({{1, 1}, {0.5, 1.9}}, 9, Options320());
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(),
              HasSubstr("all 2 labels are under 2 px on both sides"));
}

TEST(CheckAnchorsTest, RejectsBadInputsByName) {
  const auto images = Images(10, 10, 100, 10);
  EXPECT_THAT(CheckAnchors(images, kDefaultAnchors, {8, 16}, {}).status().message(),
              HasSubstr("9 anchors over 2 strides"));
  const std::vector<std::vector<BoxSize>> nan_box = {{{1, 1}},
                                                     {{5, 5}, {std::nan(""), 3}}};
  EXPECT_THAT(CheckAnchors(nan_box, kDefaultAnchors, kStrides, {}).status().message(),
              HasSubstr("image 1, label 1 has size nanx3"));
  AutoAnchorOptions o;
  o.generations = -1;
  EXPECT_THAT(CheckAnchors(images, kDefaultAnchors, kStrides, o).status().message(),
              HasSubstr("generations is -1"));
  o = {};
  o.kmeans_restarts = 0;
  EXPECT_THAT(ComputeKMeansAnchors(Flat(images), 9, o).status().message(),
              HasSubstr("kmeans_restarts is 0"));
  EXPECT_THAT(ComputeKMeansAnchors(Flat(images), 0, {}).status().message(),
              HasSubstr("0 anchors asked for"));
}

// ----------------------------------------------------------- anchor order

TEST(CheckAnchorOrderTest, ReversesLevelsWhoseAreasFallAsStridesGrow) {
  std::vector<BoxSize> anchors(kDefaultAnchors.rbegin(), kDefaultAnchors.rend());
  absl::StatusOr<bool> reversed = CheckAnchorOrder(anchors, kStrides);
  ASSERT_TRUE(reversed.ok()) << reversed.status();
  EXPECT_TRUE(*reversed);
  // Levels reversed; the anchors within a level keep their order.
  const std::vector<BoxSize> want = {{33, 23},   {16, 30},   {10, 13},
                                     {59, 119},  {62, 45},   {30, 61},
                                     {373, 326}, {156, 198}, {116, 90}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(anchors[i].w, want[i].w) << i;
    EXPECT_EQ(anchors[i].h, want[i].h) << i;
  }
}

TEST(CheckAnchorOrderTest, LeavesMatchingAndFlatOrdersAlone) {
  std::vector<BoxSize> anchors = kDefaultAnchors;
  EXPECT_FALSE(*CheckAnchorOrder(anchors, kStrides));
  EXPECT_EQ(anchors[0].w, 10);
  // Descending strides with descending areas match too.
  std::vector<BoxSize> descending(kDefaultAnchors.rbegin(), kDefaultAnchors.rend());
  EXPECT_FALSE(*CheckAnchorOrder(descending, {32, 16, 8}));
  // Equal mean areas at both ends: no order to check (YOLOv5's `if da`).
  std::vector<BoxSize> flat = {{10, 40}, {20, 20}, {40, 10}};
  EXPECT_FALSE(*CheckAnchorOrder(flat, kStrides));
  EXPECT_EQ(flat[0].w, 10);
  std::vector<BoxSize> odd = {{1, 1}, {2, 2}};
  EXPECT_FALSE(CheckAnchorOrder(odd, kStrides).ok());
}

}  // namespace
}  // namespace elastrun::trainer::detect
