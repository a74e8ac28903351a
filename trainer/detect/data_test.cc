#include "trainer/detect/data.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/detect/data_test_util.h"
#include "trainer/detect/image.h"
#include "trainer/test_files.h"

namespace elastrun::trainer::detect {
namespace {

namespace fs = std::filesystem;
using ::elastrun::trainer::testing::TestDir;
using test_util::LabelNear;
using test_util::WriteImage;
using test_util::WriteText;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Paths(const Split& split) {
  std::vector<std::string> out;
  for (const ImageEntry& e : split.images) out.push_back(e.path);
  return out;
}

std::string Warnings(const Split& split) { return absl::StrJoin(split.warnings, "\n"); }

TEST(ScanSplitTest, YoloFolderForm) {
  const std::string d = TestDir();
  WriteImage(d + "/images/train/a.png", 40, 20);
  WriteImage(d + "/images/train/b.png", 30, 30);
  WriteImage(d + "/images/train/c.png", 30, 30);
  WriteImage(d + "/images/train/sub/d.PNG", 12, 11);
  WriteText(d + "/labels/train/a.txt", "1 0.5 0.5 0.5 0.5\n0 0.25 0.25 0.1 0.1\n");
  WriteText(d + "/labels/train/c.txt", "");
  WriteText(d + "/labels/train/sub/d.txt", "2 0.5 0.5 1 1\n");
  WriteText(d + "/images/train/notes.md", "not an image");
  absl::StatusOr<Split> s = ScanSplit("train", {d + "/images/train"}, 3);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(Paths(*s),
              ElementsAre(d + "/images/train/a.png", d + "/images/train/b.png",
                          d + "/images/train/c.png", d + "/images/train/sub/d.PNG"));
  EXPECT_EQ(s->images[0].width, 40);
  EXPECT_EQ(s->images[0].height, 20);
  EXPECT_THAT(s->images[0].labels, ElementsAre(LabelNear(1, 0.5f, 0.5f, 0.5f, 0.5f),
                                               LabelNear(0, 0.25f, 0.25f, 0.1f, 0.1f)));
  EXPECT_TRUE(s->images[1].labels.empty());
  EXPECT_TRUE(s->images[2].labels.empty());
  EXPECT_THAT(s->images[3].labels, ElementsAre(LabelNear(2, 0.5f, 0.5f, 1, 1)));
  EXPECT_EQ(s->counts.found, 3);
  EXPECT_EQ(s->counts.missing, 1);
  EXPECT_EQ(s->counts.empty, 1);
  EXPECT_EQ(s->counts.corrupt, 0);
  EXPECT_TRUE(s->warnings.empty()) << Warnings(*s);
  EXPECT_EQ(
      ScanSummary(*s),
      "train: 4 images, 3 objects; 3 label files found, 1 missing, 1 empty, 0 corrupt "
      "(left out)");
}

TEST(ScanSplitTest, YoloListFormWithRelativeAbsoluteAndRepeatedLines) {
  const std::string d = TestDir();
  WriteImage(d + "/images/a.png", 20, 20);
  WriteImage(d + "/images/b.png", 20, 20);
  WriteImage(d + "/other/images/c.png", 20, 20);
  WriteText(d + "/labels/a.txt", "0 0.5 0.5 0.2 0.2\n");
  WriteText(d + "/labels/b.txt", "1 0.5 0.5 0.2 0.2\n");
  WriteText(d + "/list.txt", absl::StrCat("./images/a.png\nimages/b.png\r\n\n", d,
                                          "/other/images/c.png\nREADME\n"));
  WriteText(d + "/more.txt", "images/a.png\n");
  absl::StatusOr<Split> s = ScanSplit("val", {d + "/list.txt", d + "/more.txt"}, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(Paths(*s), ElementsAre(d + "/images/a.png", d + "/images/b.png",
                                     d + "/other/images/c.png"));
  EXPECT_EQ(s->images[1].labels[0].cls, 1);
  EXPECT_EQ(s->counts.missing, 1);
  EXPECT_EQ(s->counts.repeated, 1);
  EXPECT_THAT(Warnings(*s), HasSubstr("list.txt: 1 line(s) naming no image"));
  EXPECT_THAT(Warnings(*s), HasSubstr("images/a.png: listed more than once, kept once"));
}

TEST(ScanSplitTest, AnnotationLinesForm) {
  const std::string d = TestDir();
  WriteImage(d + "/img/x.png", 100, 50);
  WriteImage(d + "/img/y z.png", 40, 40);
  WriteImage(d + "/img/w.png", 40, 40);
  WriteText(d + "/2007_train.txt",
            "img/x.png 10,5,30,45,1 0,0,100,50,0\n"
            "img/y z.png\n"
            "img/w.png 1,2,3\n");
  absl::StatusOr<Split> s = ScanSplit("train", {d + "/2007_train.txt"}, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(Paths(*s), ElementsAre(d + "/img/x.png", d + "/img/y z.png"));
  EXPECT_THAT(s->images[0].labels, ElementsAre(LabelNear(1, 0.2f, 0.5f, 0.2f, 0.8f),
                                               LabelNear(0, 0.5f, 0.5f, 1, 1)));
  EXPECT_TRUE(s->images[1].labels.empty());
  EXPECT_EQ(s->counts.found, 1);
  EXPECT_EQ(s->counts.empty, 1);
  EXPECT_EQ(s->counts.corrupt, 1);
  EXPECT_THAT(Warnings(*s),
              HasSubstr("WARNING: ignoring corrupt image/label: " + d +
                        "/2007_train.txt:3: box 1 '1,2,3' is not x1,y1,x2,y2,class"));

  WriteText(d + "/bad.txt", "img/x.png 10,5,30,45,1\nimg/w.png 10,5,30,45,7\n");
  s = ScanSplit("val", {d + "/bad.txt"}, 2);
  EXPECT_TRUE(absl::IsOutOfRange(s.status()));
  EXPECT_THAT(s.status().message(),
              HasSubstr("val: " + d + "/bad.txt:2: box 1: class 7 is not below nc=2"));

  WriteText(d + "/out.txt", "img/x.png 10,5,130,45,1\nimg/w.png 50,5,60,45,1\n");
  s = ScanSplit("val", {d + "/out.txt"}, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(Paths(*s), ElementsAre(d + "/img/x.png"));
  EXPECT_THAT(s->images[0].labels, ElementsAre(LabelNear(1, 0.55f, 0.5f, 0.9f, 0.8f)));
  EXPECT_EQ(s->counts.clipped, 1);
  EXPECT_THAT(Warnings(*s),
              HasSubstr("out.txt:1: box 1: 1 box(es) reaching beyond the image "
                        "clipped to it"));
  EXPECT_THAT(Warnings(*s),
              HasSubstr("out.txt:2: box 1 (x1,y1,x2,y2 = 50,5,60,45): wholly "
                        "outside the 40x40 image"));
}

TEST(LoadDatasetTest, BothFormsFromOneDataYaml) {
  const std::string d = TestDir();
  WriteImage(d + "/ds/images/train/a.png", 20, 20);
  WriteText(d + "/ds/labels/train/a.txt", "1 0.5 0.5 0.2 0.2\n");
  WriteImage(d + "/ds/val/b.png", 20, 10);
  WriteText(d + "/ds/val.txt", "val/b.png 0,0,10,10,0\n");
  WriteText(d + "/data.yaml",
            "path: ds\ntrain: images/train\nval: val.txt\nnames: [a, b]\n");
  absl::StatusOr<Dataset> ds = LoadDataset(d + "/data.yaml");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_THAT(ds->yaml.names, ElementsAre("a", "b"));
  EXPECT_THAT(ds->train.images[0].labels,
              ElementsAre(LabelNear(1, 0.5f, 0.5f, 0.2f, 0.2f)));
  EXPECT_THAT(ds->val.images[0].labels, ElementsAre(LabelNear(0, 0.25f, 0.5f, 0.5f, 1)));
  WriteText(d + "/data.yaml",
            "path: ds\ntrain: images/train\nval: images/val\nnames: [a]\n");
  EXPECT_TRUE(absl::IsNotFound(LoadDataset(d + "/data.yaml").status()));
}

// The bad inputs of YOLOv5's verify_image_label, each left out with a
// counted warning naming the file (and line).
TEST(ScanSplitTest, CorruptImagesAndLabelsAreLeftOutWithWarnings) {
  const std::string d = TestDir();
  const std::string im = d + "/images/", lb = d + "/labels/";
  WriteImage(im + "good.png", 20, 20);
  WriteText(lb + "good.txt", "0 0.5 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.2\n");
  const std::string jpeg = *EncodeImage(Image(20, 20), ImageFormat::kJpeg, 90);
  WriteText(im + "cut.jpg", jpeg.substr(0, jpeg.size() / 2));
  const std::string png = *EncodeImage(Image(20, 20), ImageFormat::kPng);
  WriteText(im + "cut.png", png.substr(0, png.size() - 5));
  WriteText(im + "zero.png", "");
  WriteImage(im + "tiny.png", 9, 20);
  fs::create_directories(im + "folder.jpg");
  WriteImage(im + "folder.jpg/inner.png", 20, 20);
  WriteImage(im + "big.png", 20, 20);
  WriteText(lb + "big.txt", "0 0.5 0.5 0.2 0.2\n0 0.5 0.5 1.5 0.2\n");
  WriteImage(im + "cols.png", 20, 20);
  WriteText(lb + "cols.txt", "0 0.5 0.5 0.2\n");
  WriteImage(im + "edge.png", 20, 20);
  WriteText(lb + "edge.txt", "0 0.95 0.5 0.2 0.2\n");
  WriteImage(im + "\xff\xfe.png", 20, 20);
  WriteText(lb + "\xff\xfe.txt", "0 0.5 0.5 x 0.2\n");
  absl::StatusOr<Split> s = ScanSplit("train", {d + "/images"}, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(Paths(*s),
              ElementsAre(im + "edge.png", im + "folder.jpg/inner.png", im + "good.png"));
  const std::string w = Warnings(*s);
  const std::string corrupt = "WARNING: ignoring corrupt image/label: ";
  EXPECT_THAT(w, HasSubstr(corrupt + im + "cut.jpg: truncated JPEG"));
  EXPECT_THAT(w, HasSubstr(corrupt + im + "cut.png: truncated PNG"));
  EXPECT_THAT(w,
              HasSubstr(corrupt + im + "zero.png: empty file (0 bytes), not an image"));
  EXPECT_THAT(w,
              HasSubstr(corrupt + im + "tiny.png: image size 9x20 is below 10 pixels"));
  EXPECT_THAT(w, HasSubstr(corrupt + im + "folder.jpg: is a directory, not a file"));
  EXPECT_THAT(w,
              HasSubstr(corrupt + lb + "big.txt:2: coordinate 1.5 > 1: not normalised"));
  EXPECT_THAT(w, HasSubstr(corrupt + lb + "cols.txt:1: 4 columns"));
  EXPECT_THAT(w,
              HasSubstr(corrupt + lb + "\\xff\\xfe.txt:1: 'x' is not a finite number"));
  EXPECT_THAT(w, HasSubstr("WARNING: " + lb + "good.txt: 2 duplicate labels removed"));
  EXPECT_THAT(w, HasSubstr("WARNING: " + lb +
                           "edge.txt:1: 1 box(es) reaching beyond the "
                           "image clipped to it"));
  EXPECT_EQ(s->counts.corrupt, 8);
  EXPECT_EQ(s->counts.duplicates, 2);
  EXPECT_EQ(s->counts.clipped, 1);
  EXPECT_THAT(s->images[0].labels, ElementsAre(LabelNear(0, 0.925f, 0.5f, 0.15f, 0.2f)));
  EXPECT_THAT(ScanSummary(*s),
              HasSubstr("8 corrupt (left out), 2 duplicate labels removed, "
                        "1 boxes clipped to their image"));
}

TEST(ScanSplitTest, ClassNotBelowNcStopsTheScanNamingFileAndLine) {
  const std::string d = TestDir();
  for (const char* name : {"a", "b", "c"})
    WriteImage(d + "/images/" + name + ".png", 20, 20);
  WriteText(d + "/labels/a.txt", "0 0.5 0.5 0.2 0.2\n");
  WriteText(d + "/labels/b.txt", "0 0.5 0.5 0.2 0.2\n3 0.5 0.5 0.2 0.2\n");
  WriteText(d + "/labels/c.txt", "5 0.5 0.5 0.2 0.2\n");
  absl::StatusOr<Split> s = ScanSplit("train", {d + "/images"}, 3);
  EXPECT_TRUE(absl::IsOutOfRange(s.status()));
  EXPECT_THAT(
      s.status().message(),
      HasSubstr("train: " + d +
                "/labels/b.txt:2: class 3 is not below nc=3 (classes "
                "are 0-2): fix the label, or nc and names in data.yaml (and in 1 more "
                "images)"));
}

TEST(ScanSplitTest, EmptyOrMissingLabelsFolderIsAnError) {
  const std::string d = TestDir();
  WriteImage(d + "/images/train/a.png", 20, 20);
  WriteImage(d + "/images/train/b.png", 20, 20);
  absl::StatusOr<Split> s = ScanSplit("train", {d + "/images/train"}, 3);
  EXPECT_TRUE(absl::IsNotFound(s.status()));
  EXPECT_THAT(s.status().message(),
              HasSubstr("train: no label file for any of 2 images: expected " + d +
                        "/labels/train/a.txt for " + d + "/images/train/a.png, but " + d +
                        "/labels/train does not exist"));
  fs::create_directories(d + "/labels/train");
  s = ScanSplit("train", {d + "/images/train"}, 3);
  EXPECT_THAT(s.status().message(), HasSubstr("/labels/train is empty"));
}

TEST(ScanSplitTest, NothingUsableOrNoImagesIsAnError) {
  const std::string d = TestDir();
  WriteText(d + "/images/a.jpg", "garbage");
  absl::StatusOr<Split> s = ScanSplit("val", {d + "/images"}, 3);
  EXPECT_TRUE(absl::IsFailedPrecondition(s.status()));
  EXPECT_THAT(s.status().message(),
              HasSubstr("val: no usable image: all 1 were left out; the "
                        "first: WARNING: ignoring corrupt image/label"));
  fs::create_directories(d + "/empty");
  s = ScanSplit("val", {d + "/empty"}, 3);
  EXPECT_TRUE(absl::IsInvalidArgument(s.status()));
  EXPECT_THAT(s.status().message(), HasSubstr("val: " + d +
                                              "/empty: no images found (looked "
                                              "for .bmp .dng .jpeg .jpg"));
  s = ScanSplit("val", {d + "/nowhere"}, 3);
  EXPECT_TRUE(absl::IsNotFound(s.status()));
}

TEST(ScanSplitTest, FullDecodeFindsDamageBeyondTheHeader) {
  const std::string d = TestDir();
  std::string jpeg = *EncodeImage(Image(64, 64), ImageFormat::kJpeg, 90);
  const size_t dht = jpeg.find("\xff\xc4");
  ASSERT_NE(dht, std::string::npos);
  for (size_t i = dht + 5; i < dht + 21; ++i) jpeg[i] = static_cast<char>(0xff);
  WriteText(d + "/images/bad.jpg", jpeg);
  WriteImage(d + "/images/good.png", 20, 20);
  WriteText(d + "/labels/good.txt", "0 0.5 0.5 0.2 0.2\n");
  absl::StatusOr<Split> header_only = ScanSplit("train", {d + "/images"}, 1);
  ASSERT_TRUE(header_only.ok()) << header_only.status();
  EXPECT_EQ(header_only->images.size(), 2u);
  ScanOptions options;
  options.decode_images = true;
  absl::StatusOr<Split> full = ScanSplit("train", {d + "/images"}, 1, options);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_THAT(Paths(*full), ElementsAre(d + "/images/good.png"));
  EXPECT_THAT(Warnings(*full), HasSubstr("bad.jpg: corrupt JPEG: "));
}

TEST(ScanSplitTest, SameIndexWhateverTheThreadCount) {
  const std::string d = TestDir();
  for (int i = 0; i < 60; ++i) {
    WriteImage(absl::StrCat(d, "/images/", i, ".png"), 10 + i % 7, 10 + i % 5);
    if (i % 3 != 0)
      WriteText(absl::StrCat(d, "/labels/", i, ".txt"),
                absl::StrCat(i % 4, " 0.5 0.5 0.1 0.1\n"));
    if (i % 11 == 0) WriteText(absl::StrCat(d, "/labels/", i, ".txt"), "bad\n");
  }
  ScanOptions one, many;
  one.threads = 1;
  many.threads = 7;
  absl::StatusOr<Split> a = ScanSplit("train", {d + "/images"}, 4, one);
  absl::StatusOr<Split> b = ScanSplit("train", {d + "/images"}, 4, many);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->images.size(), b->images.size());
  for (size_t i = 0; i < a->images.size(); ++i) {
    EXPECT_EQ(a->images[i].path, b->images[i].path);
    EXPECT_EQ(a->images[i].width, b->images[i].width);
    EXPECT_EQ(a->images[i].labels, b->images[i].labels);
  }
  EXPECT_EQ(a->warnings, b->warnings);
  EXPECT_EQ(ScanSummary(*a), ScanSummary(*b));
}

}  // namespace
}  // namespace elastrun::trainer::detect
