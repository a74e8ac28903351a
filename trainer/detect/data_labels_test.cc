#include "trainer/detect/data_labels.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/detect/data_test_util.h"

namespace elastrun::trainer::detect {
namespace {

using test_util::LabelNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseYoloLabelsTest, ReadsBoxesAndPolygonsAndSkipsBlankLines) {
  absl::StatusOr<ImageLabels> l = ParseYoloLabels(
      "0 0.5 0.5 0.2 0.4\r\n\n   \n3 0.1 0.2 0.3 0.2 0.2 0.4\n", "a.txt", 4);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(l->labels, ElementsAre(LabelNear(0, 0.5f, 0.5f, 0.2f, 0.4f),
                                     LabelNear(3, 0.2f, 0.3f, 0.2f, 0.2f)));
  EXPECT_EQ(l->duplicates, 0);
  EXPECT_EQ(l->clipped, 0);
}

TEST(ParseYoloLabelsTest, EmptyTextHasNoLabels) {
  absl::StatusOr<ImageLabels> l = ParseYoloLabels("", "a.txt", 1);
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->labels.empty());
}

TEST(ParseYoloLabelsTest, ClassNotBelowNcIsOutOfRangeNamingFileAndLine) {
  absl::StatusOr<ImageLabels> l =
      ParseYoloLabels("1 .5 .5 .1 .1\n10 .5 .5 .1 .1\n", "x.txt", 10);
  EXPECT_TRUE(absl::IsOutOfRange(l.status()));
  EXPECT_THAT(l.status().message(), HasSubstr("x.txt:2: class 10 is not below nc=10"));
}

TEST(ParseYoloLabelsTest, MalformedLinesAreDataLossNamingFileAndLine) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {
           Case{"0 0.5 0.5 0.1", "f.txt:1: 4 columns"},
           Case{"0 0.5 0.5 0.1 0.1 0.3", "f.txt:1: 6 columns"},
           Case{"\n0 0.5 0.5 0.1 0.1 0.3 0.2 0.1", "f.txt:2: a polygon of 7 coordinates"},
           Case{"0 0.5 abc 0.1 0.1", "f.txt:1: 'abc' is not a finite number"},
           Case{"0 0.5 nan 0.1 0.1", "'nan' is not a finite number"},
           Case{"0 0.5 0.5 -0.1 0.1", "negative coordinate -0.1"},
           Case{"0 0.5 0.5 1.2 0.1",
                "coordinate 1.2 > 1: not normalised or out of bounds"},
           Case{"0 12 30 4 4", "coordinate 12 > 1"},
           Case{"-1 0.5 0.5 0.1 0.1", "negative class -1"},
           Case{"1.5 0.5 0.5 0.1 0.1", "class 1.5 is not a whole number"},
           Case{"0 0.5 \xff 0.1 0.1", "'\\xff' is not a finite number"},
       }) {
    absl::StatusOr<ImageLabels> l = ParseYoloLabels(c.text, "f.txt", 3);
    EXPECT_TRUE(absl::IsDataLoss(l.status())) << c.text << ": " << l.status();
    EXPECT_THAT(l.status().message(), HasSubstr(c.message)) << c.text;
  }
}

TEST(ParseYoloLabelsTest, WholeClassWrittenAsFloatIsAccepted) {
  absl::StatusOr<ImageLabels> l = ParseYoloLabels("2.0 0.5 0.5 0.1 0.1", "f.txt", 3);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->labels[0].cls, 2);
}

TEST(ParseYoloLabelsTest, DuplicatesAreRemovedAndCounted) {
  absl::StatusOr<ImageLabels> l = ParseYoloLabels(
      "0 0.5 0.5 0.1 0.1\n1 0.5 0.5 0.1 0.1\n0 0.5 0.5 0.1 0.1\n0 0.50 0.5 0.1 0.1\n",
      "f.txt", 2);
  ASSERT_TRUE(l.ok());
  EXPECT_THAT(l->labels, ElementsAre(LabelNear(0, 0.5f, 0.5f, 0.1f, 0.1f),
                                     LabelNear(1, 0.5f, 0.5f, 0.1f, 0.1f)));
  EXPECT_EQ(l->duplicates, 2);
}

TEST(ParseYoloLabelsTest, BoxesReachingBeyondTheImageAreClipped) {
  // x from -0.05 to 0.15; y from 0.9 to 1.1.
  absl::StatusOr<ImageLabels> l =
      ParseYoloLabels("0 0.5 0.5 0.2 0.2\n0 0.05 1 0.2 0.2\n", "f.txt", 1);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(l->labels, ElementsAre(LabelNear(0, 0.5f, 0.5f, 0.2f, 0.2f),
                                     LabelNear(0, 0.075f, 0.95f, 0.15f, 0.1f)));
  EXPECT_EQ(l->clipped, 1);
  EXPECT_EQ(l->first_clipped_line, 2);
}

TEST(ParseYoloLabelsTest, RoundingBeyondTheEdgeIsClippedWithoutCounting) {
  absl::StatusOr<ImageLabels> l = ParseYoloLabels("0 0.500001 0.5 1 1\n", "f.txt", 1);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->clipped, 0);
  EXPECT_LE(l->labels[0].cx + l->labels[0].w / 2, 1.0f + 1e-6f);
}

TEST(AnnotationLineTest, ReadsPathAndPixelBoxes) {
  absl::StatusOr<AnnotationLine> a = ParseAnnotationLine(
      "  VOC/JPEGImages/000001.jpg 48,240,195,371,11 8,12,352,498,14  ", "train.txt:1",
      20);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->path, "VOC/JPEGImages/000001.jpg");
  ASSERT_EQ(a->boxes.size(), 2u);
  EXPECT_EQ(a->boxes[0].x1, 48);
  EXPECT_EQ(a->boxes[0].y2, 371);
  EXPECT_EQ(a->boxes[1].cls, 14);
}

TEST(AnnotationLineTest, PathMayHoldSpacesAndLineMayHaveNoBoxes) {
  absl::StatusOr<AnnotationLine> a =
      ParseAnnotationLine("my photos/a b.jpg 1,2,30,40,0", "t.txt:3", 1);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->path, "my photos/a b.jpg");
  EXPECT_EQ(a->boxes.size(), 1u);
  a = ParseAnnotationLine("x,y.jpg", "t.txt:4", 1);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->path, "x,y.jpg");
  EXPECT_TRUE(a->boxes.empty());
}

TEST(AnnotationLineTest, BadBoxesNameTheLineAndBox) {
  absl::StatusOr<AnnotationLine> a =
      ParseAnnotationLine("a.jpg 1,2,3,4,0 1,2,3,4", "t.txt:7", 2);
  EXPECT_TRUE(absl::IsDataLoss(a.status()));
  EXPECT_THAT(a.status().message(),
              HasSubstr("t.txt:7: box 2 '1,2,3,4' is not x1,y1,x2,y2,class"));
  a = ParseAnnotationLine("a.jpg 1,2,3,4,5", "t.txt:8", 5);
  EXPECT_TRUE(absl::IsOutOfRange(a.status()));
  EXPECT_THAT(a.status().message(),
              HasSubstr("t.txt:8: box 1: class 5 is not below nc=5"));
  a = ParseAnnotationLine("a.jpg 1,2,3,4,-1", "t.txt:9", 5);
  EXPECT_THAT(a.status().message(), HasSubstr("negative class"));
}

TEST(PixelBoxesTest, NormalisesClipsAndRemovesDuplicates) {
  std::vector<PixelBox> boxes = {
      {10, 20, 30, 60, 1}, {-10, 0, 20, 10, 0}, {10, 20, 30, 60, 1}};
  absl::StatusOr<ImageLabels> l = PixelBoxesToLabels(boxes, 100, 200, "t.txt:1");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(l->labels, ElementsAre(LabelNear(1, 0.2f, 0.2f, 0.2f, 0.2f),
                                     LabelNear(0, 0.1f, 0.025f, 0.2f, 0.05f)));
  EXPECT_EQ(l->clipped, 1);
  EXPECT_EQ(l->duplicates, 1);
}

TEST(PixelBoxesTest, EmptyInvertedAndOutsideBoxesAreDataLoss) {
  absl::StatusOr<ImageLabels> l =
      PixelBoxesToLabels({{30, 20, 10, 60, 0}}, 100, 100, "t.txt:2");
  EXPECT_TRUE(absl::IsDataLoss(l.status()));
  EXPECT_THAT(l.status().message(),
              HasSubstr("t.txt:2: box 1 (x1,y1,x2,y2 = 30,20,10,60): empty or inverted"));
  l = PixelBoxesToLabels({{0, 0, 5, 5, 0}, {120, 10, 130, 20, 0}}, 100, 100, "t.txt:3");
  EXPECT_THAT(l.status().message(),
              HasSubstr("box 2 (x1,y1,x2,y2 = 120,10,130,20): wholly "
                        "outside the 100x100 image"));
}

TEST(DisplayTextTest, KeepsUtf8AndEscapesOtherBytes) {
  EXPECT_EQ(DisplayText("caf\xc3\xa9/\xe2\x82\xac.jpg"), "caf\xc3\xa9/\xe2\x82\xac.jpg");
  EXPECT_EQ(DisplayText("a\xff"
                        "b\n\xc3"),
            "a\\xffb\\x0a\\xc3");
}

}  // namespace
}  // namespace elastrun::trainer::detect
