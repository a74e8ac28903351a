#include "trainer/detect/hyp.h"

#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/config/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/test_files.h"

namespace elastrun::trainer::detect {
namespace {

using ::testing::HasSubstr;
using trainer::testing::TestDir;

// YOLOv5's data/hyps/hyp.scratch-low.yaml, as seed 002 quotes it.
constexpr char kScratchLow[] = R"(# YOLOv5 by Ultralytics, AGPL-3.0 license
# Hyperparameters for low-augmentation COCO training from scratch

lr0: 0.01 # initial learning rate (SGD=1E-2, Adam=1E-3)
lrf: 0.01 # final OneCycleLR learning rate (lr0 * lrf)
momentum: 0.937 # SGD momentum/Adam beta1
weight_decay: 0.0005 # optimizer weight decay 5e-4
warmup_epochs: 3.0 # warmup epochs (fractions ok)
warmup_momentum: 0.8 # warmup initial momentum
warmup_bias_lr: 0.1 # warmup initial bias lr
box: 0.05 # box loss gain
cls: 0.5 # cls loss gain
cls_pw: 1.0 # cls BCELoss positive_weight
obj: 1.0 # obj loss gain (scale with pixels)
obj_pw: 1.0 # obj BCELoss positive_weight
iou_t: 0.20 # IoU training threshold
anchor_t: 4.0 # anchor-multiple threshold
# anchors: 3  # anchors per output layer (0 to ignore)
fl_gamma: 0.0 # focal loss gamma (efficientDet default gamma=1.5)
hsv_h: 0.015 # image HSV-Hue augmentation (fraction)
hsv_s: 0.7 # image HSV-Saturation augmentation (fraction)
hsv_v: 0.4 # image HSV-Value augmentation (fraction)
degrees: 0.0 # image rotation (+/- deg)
translate: 0.1 # image translation (+/- fraction)
scale: 0.5 # image scale (+/- gain)
shear: 0.0 # image shear (+/- deg)
perspective: 0.0 # image perspective (+/- fraction), range 0-0.001
flipud: 0.0 # image flip up-down (probability)
fliplr: 0.5 # image flip left-right (probability)
mosaic: 1.0 # image mosaic (probability)
mixup: 0.0 # image mixup (probability)
copy_paste: 0.0 # segment copy-paste (probability)
)";

// hyp.scratch-med.yaml and hyp.scratch-high.yaml differ from -low in these
// lines only (YOLOv5 v7.0).
std::string ScratchMed() {
  return absl::StrReplaceAll(kScratchLow, {{"lrf: 0.01 ", "lrf: 0.1 "},
                                           {"cls: 0.5 ", "cls: 0.3 "},
                                           {"obj: 1.0 ", "obj: 0.7 "},
                                           {"scale: 0.5 ", "scale: 0.9 "},
                                           {"mixup: 0.0 ", "mixup: 0.1 "}});
}
std::string ScratchHigh() {
  return absl::StrReplaceAll(ScratchMed(), {{"copy_paste: 0.0 ", "copy_paste: 0.1 "}});
}

std::string WriteFile(const std::string& dir, const std::string& name,
                      const std::string& text) {
  const std::string path = absl::StrCat(dir, "/", name);
  std::ofstream(path) << text;
  return path;
}

// The `hyp:` section of a config written as `text` in run.yaml.
config::Node Section(const std::string& text) {
  absl::StatusOr<config::Node> root = config::ParseYaml(text, "run.yaml");
  EXPECT_TRUE(root.ok()) << root.status();
  const config::Node* hyp = root->Find("hyp");
  EXPECT_NE(hyp, nullptr);
  return *hyp;
}

// LoadHyp's error for `text` in hyp.yaml, which must name hyp.yaml:line and
// the key.
std::string FileError(const std::string& text, int line, const std::string& key) {
  const std::string path = WriteFile(TestDir(), "hyp.yaml", text);
  absl::StatusOr<Hyp> hyp = LoadHyp(path, nullptr);
  EXPECT_FALSE(hyp.ok());
  if (hyp.ok()) return "";
  EXPECT_EQ(hyp.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(hyp.status().message());
  EXPECT_THAT(message, HasSubstr(absl::StrCat(path, ":", line, ":")));
  EXPECT_THAT(message, HasSubstr(key));
  return message;
}

TEST(HypTest, NothingGivenIsScratchLow) {
  absl::StatusOr<Hyp> hyp = LoadHyp("", nullptr);
  ASSERT_TRUE(hyp.ok()) << hyp.status();
  EXPECT_EQ(*hyp, Hyp{});
  config::Node null_section;
  hyp = LoadHyp("", &null_section);
  ASSERT_TRUE(hyp.ok()) << hyp.status();
  EXPECT_EQ(*hyp, Hyp{});
}

TEST(HypTest, YoloV5ScratchLowMedHighLoad) {
  const std::string dir = TestDir();
  absl::StatusOr<Hyp> low = LoadHyp(WriteFile(dir, "hyp.scratch-low.yaml", kScratchLow), nullptr);
  ASSERT_TRUE(low.ok()) << low.status();
  EXPECT_EQ(*low, Hyp{});

  absl::StatusOr<Hyp> med = LoadHyp(WriteFile(dir, "hyp.scratch-med.yaml", ScratchMed()), nullptr);
  ASSERT_TRUE(med.ok()) << med.status();
  Hyp want;
  want.lrf = 0.1;
  want.cls = 0.3;
  want.obj = 0.7;
  want.scale = 0.9;
  want.mixup = 0.1;
  EXPECT_EQ(*med, want);

  // -high asks for copy-paste, which needs segments: refused by name until
  // the config turns it off.
  const std::string high_path = WriteFile(dir, "hyp.scratch-high.yaml", ScratchHigh());
  absl::StatusOr<Hyp> high = LoadHyp(high_path, nullptr);
  ASSERT_FALSE(high.ok());
  EXPECT_THAT(high.status().message(), HasSubstr(absl::StrCat(high_path, ":32:")));
  EXPECT_THAT(high.status().message(),
              HasSubstr("copy_paste needs segment labels, which these datasets do not have"));
  const config::Node off = Section("hyp:\n  copy_paste: 0\n");
  high = LoadHyp(high_path, &off);
  ASSERT_TRUE(high.ok()) << high.status();
  EXPECT_EQ(*high, want);
}

TEST(HypTest, SectionWinsOverFileKeyByKey) {
  const std::string path = WriteFile(TestDir(), "hyp.yaml", "lr0: 0.02\nbox: 0.1\n");
  const config::Node section = Section("hyp:\n  box: 0.07\n  label_smoothing: 0.1\n");
  absl::StatusOr<Hyp> hyp = LoadHyp(path, &section);
  ASSERT_TRUE(hyp.ok()) << hyp.status();
  EXPECT_EQ(hyp->lr0, 0.02);
  EXPECT_EQ(hyp->box, 0.07);
  EXPECT_EQ(hyp->label_smoothing, 0.1);
  EXPECT_EQ(hyp->cls, Hyp{}.cls);

  // A bad file value that the section overrides is no error; a bad section
  // value names the config's line.
  const std::string bad = WriteFile(TestDir(), "hyp.yaml", "box: -1\n");
  EXPECT_TRUE(LoadHyp(bad, &section).ok());
  const config::Node negative = Section("hyp:\n  lr0: 0.01\n  obj: -2\n");
  absl::StatusOr<Hyp> err = LoadHyp("", &negative);
  ASSERT_FALSE(err.ok());
  EXPECT_THAT(err.status().message(), HasSubstr("run.yaml:3:8: hyp.obj: must be >= 0, got -2.0"));
}

TEST(HypTest, UnknownKeysNameFileLineAndSuggest) {
  EXPECT_THAT(FileError("lr0: 0.01\nmomentun: 0.9\n", 2, "'momentun'"),
              HasSubstr("did you mean: momentum"));
  EXPECT_THAT(FileError("area_threshold: 0.3\n", 1, "'area_threshold'"),
              HasSubstr("unknown key"));
  const config::Node section = Section("other: 1\nhyp:\n  fl_gama: 1.5\n");
  absl::StatusOr<Hyp> hyp = LoadHyp("", &section);
  ASSERT_FALSE(hyp.ok());
  EXPECT_THAT(hyp.status().message(), HasSubstr("run.yaml:3:3: hyp.fl_gama: unknown key"));
  EXPECT_THAT(hyp.status().message(), HasSubstr("did you mean: fl_gamma"));
  const config::Node target = Section("hyp:\n  _target_: x\n");
  hyp = LoadHyp("", &target);
  ASSERT_FALSE(hyp.ok());
  EXPECT_THAT(hyp.status().message(), HasSubstr("run.yaml:2:13: hyp._target_"));
}

TEST(HypTest, ValuesOutsideTheirRangeNameKeyAndLine) {
  EXPECT_THAT(FileError("lr0: 0.01\nbox: -0.05\n", 2, "box"), HasSubstr("must be >= 0"));
  EXPECT_THAT(FileError("cls: -1\n", 1, "cls"), HasSubstr("must be >= 0"));
  EXPECT_THAT(FileError("obj_pw: 0\n", 1, "obj_pw"), HasSubstr("must be > 0"));
  EXPECT_THAT(FileError("lr0: 0\n", 1, "lr0"), HasSubstr("must be > 0"));
  EXPECT_THAT(FileError("\nlrf: 0.0\n", 2, "lrf"), HasSubstr("must be > 0"));
  EXPECT_THAT(FileError("anchor_t: 1\n", 1, "anchor_t"), HasSubstr("must be > 1"));
  EXPECT_THAT(FileError("fliplr: 1.5\n", 1, "fliplr"), HasSubstr("must be in [0, 1], got 1.5"));
  EXPECT_THAT(FileError("mosaic: -0.1\n", 1, "mosaic"), HasSubstr("in [0, 1]"));
  EXPECT_THAT(FileError("momentum: 1.0\n", 1, "momentum"), HasSubstr("in [0, 1)"));
  EXPECT_THAT(FileError("scale: 1.2\n", 1, "scale"), HasSubstr("in [0, 1)"));
  EXPECT_THAT(FileError("perspective: 0.1\n", 1, "perspective"), HasSubstr("0.001]"));
  EXPECT_THAT(FileError("label_smoothing: 2\n", 1, "label_smoothing"), HasSubstr("[0, 1]"));
  EXPECT_THAT(FileError("weight_decay: .nan\n", 1, "weight_decay"), HasSubstr("finite"));
  EXPECT_THAT(FileError("lr0: fast\n", 1, "lr0"), HasSubstr("expected double"));
  EXPECT_THAT(FileError("copy_paste: 0.5\n", 1, "copy_paste"),
              HasSubstr("copy_paste needs segment labels, which these datasets do not have"));
  EXPECT_THAT(FileError("anchors: 4\n", 1, "anchors"), HasSubstr("must be 3"));
  EXPECT_THAT(FileError("anchors: 2.5\n", 1, "anchors"), HasSubstr("got 2.5"));
}

TEST(HypTest, AnchorsThreeOrZero) {
  for (const char* text : {"anchors: 3\n", "anchors: 3.0\n"}) {
    absl::StatusOr<Hyp> hyp = LoadHyp(WriteFile(TestDir(), "hyp.yaml", text), nullptr);
    ASSERT_TRUE(hyp.ok()) << hyp.status();
    EXPECT_EQ(hyp->anchors, 3);
  }
  absl::StatusOr<Hyp> hyp = LoadHyp(WriteFile(TestDir(), "hyp.yaml", "anchors: 0\n"), nullptr);
  ASSERT_TRUE(hyp.ok()) << hyp.status();
  EXPECT_EQ(hyp->anchors, 0);
}

TEST(HypTest, BadFilesAndSections) {
  absl::StatusOr<Hyp> hyp = LoadHyp(TestDir() + "/missing.yaml", nullptr);
  EXPECT_EQ(hyp.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(hyp.status().message(), HasSubstr("missing.yaml"));
  hyp = LoadHyp(WriteFile(TestDir(), "hyp.yaml", "- 1\n- 2\n"), nullptr);
  EXPECT_EQ(hyp.status().code(), absl::StatusCode::kInvalidArgument);
  hyp = LoadHyp(WriteFile(TestDir(), "hyp.yaml", "lr0: [0.01\n"), nullptr);
  EXPECT_EQ(hyp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(hyp.status().message(), HasSubstr("hyp.yaml"));
  const config::Node scalar = Section("hyp: 3\n");
  hyp = LoadHyp("", &scalar);
  EXPECT_EQ(hyp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(hyp.status().message(), HasSubstr("run.yaml:1:6"));
}

TEST(HypTest, ToYamlRoundTrips) {
  const std::string dir = TestDir();
  Hyp odd;
  odd.lr0 = 1e-5;
  odd.lrf = 0.1 + 0.2;  // 0.30000000000000004: needs all 17 digits
  odd.momentum = 1.0 / 3;
  odd.weight_decay = 0;
  odd.box = 0.2;
  odd.fl_gamma = 1.5;
  odd.perspective = 1e-4;
  odd.anchor_t = 2.91;
  odd.anchors = 0;
  odd.label_smoothing = 0.1;
  for (const Hyp& hyp : {Hyp{}, odd}) {
    const std::string text = HypToYaml(hyp);
    absl::StatusOr<Hyp> back = LoadHyp(WriteFile(dir, "hyp.yaml", text), nullptr);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
    EXPECT_EQ(*back, hyp) << text;
  }
  const std::string low = HypToYaml(Hyp{});
  EXPECT_THAT(low, HasSubstr("\nweight_decay: 0.0005  # "));
  EXPECT_THAT(low, HasSubstr("\nwarmup_epochs: 3.0  # "));
  EXPECT_THAT(low, HasSubstr("\n# anchors: 3  # "));  // YOLOv5 reads a set key as "new anchors"
  const std::string text = HypToYaml(odd);
  // A '.' in every float and a signed exponent: PyYAML (YAML 1.1) reads
  // "1e-05" as a string.
  EXPECT_THAT(text, HasSubstr("\nlr0: 1.0e-05  # "));
  EXPECT_THAT(text, HasSubstr("\nlrf: 0.30000000000000004  # "));
  EXPECT_THAT(text, HasSubstr("\nanchors: 0  # "));
}

TEST(HypTest, SchemaListsEveryKeyWithHypDefaults) {
  const config::Schema& schema = HypSchema();
  EXPECT_EQ(schema.fields().size(), 30u);
  absl::StatusOr<config::Node> written = config::ParseYaml(HypToYaml(Hyp{}), "hyp.yaml");
  ASSERT_TRUE(written.ok()) << written.status();
  for (const config::Field& f : schema.fields()) {
    EXPECT_FALSE(f.required) << f.name;
    EXPECT_FALSE(f.doc.empty()) << f.name;
    if (f.name == "anchors") {
      EXPECT_EQ(f.default_value.as_double(), 3);
      continue;
    }
    const config::Node* value = written->Find(f.name);
    ASSERT_NE(value, nullptr) << f.name;
    EXPECT_EQ(value->as_double(), f.default_value.as_double()) << f.name;
  }
}

TEST(HypTest, EvolveBoundsCoverYoloV5KeysAndHoldTheDefaults) {
  const config::Node defaults = *config::ParseYaml(HypToYaml(Hyp{}), "hyp.yaml");
  std::set<std::string> bounded;
  for (const HypBound& b : HypBounds()) {
    SCOPED_TRACE(b.key);
    ASSERT_NE(HypSchema().Find(b.key), nullptr);
    EXPECT_LT(b.low, b.high);
    bounded.insert(b.key);
    const double v = std::string(b.key) == "anchors" ? Hyp{}.anchors
                                                    : defaults.Find(b.key)->as_double();
    EXPECT_GE(v, b.low);
    EXPECT_LE(v, b.high);
  }
  for (const config::Field& f : HypSchema().fields()) {
    EXPECT_EQ(bounded.count(f.name), f.name == "label_smoothing" ? 0u : 1u) << f.name;
  }
  EXPECT_EQ(HypBounds().size(), 29u);
}

}  // namespace
}  // namespace elastrun::trainer::detect
