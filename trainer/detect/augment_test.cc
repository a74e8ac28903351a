#include "trainer/detect/augment.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::trainer::detect {
namespace {

using ::testing::HasSubstr;

Image Noise(int width, int height, uint64_t seed) {
  Image im(width, height);
  SampleRng rng(seed, 0, 0);
  for (uint8_t& p : im.pixels) p = static_cast<uint8_t>(rng.Next() >> 56);
  return im;
}

Image Solid(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  Image im(width, height);
  for (size_t i = 0; i < im.pixels.size(); i += 3) {
    im.pixels[i] = r, im.pixels[i + 1] = g, im.pixels[i + 2] = b;
  }
  return im;
}

TEST(SampleRngTest, SameSeedSameDrawsAnyOtherDiffers) {
  SampleRng a(7, 3, 11), b(7, 3, 11), c(7, 3, 12), d(7, 4, 11), e(8, 3, 11);
  const uint64_t first = a.Next();
  EXPECT_EQ(first, b.Next());
  EXPECT_NE(first, c.Next());
  EXPECT_NE(first, d.Next());
  EXPECT_NE(first, e.Next());
}

TEST(SampleRngTest, UniformBelowAndBetaStayInRange) {
  SampleRng rng(1, 2, 3);
  double sum = 0;
  for (int i = 0; i < 2000; ++i) {
    const double u = rng.Uniform();
    ASSERT_GE(u, 0);
    ASSERT_LT(u, 1);
    const int64_t k = rng.Below(5);
    ASSERT_GE(k, 0);
    ASSERT_LT(k, 5);
    const double beta = rng.Beta(32, 32);
    ASSERT_GT(beta, 0);
    ASSERT_LT(beta, 1);
    sum += beta;
  }
  // Beta(32, 32): mean 0.5, standard deviation 0.062; over 2000 draws the
  // mean is within 0.01 of 0.5 by far.
  EXPECT_NEAR(sum / 2000, 0.5, 0.01);
}

TEST(CheckAugmentOptionsTest, NamesTheKey) {
  AugmentOptions hyp;
  EXPECT_TRUE(CheckAugmentOptions(hyp).ok());
  hyp.fliplr = -0.5;
  absl::Status s = CheckAugmentOptions(hyp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("hyp.fliplr"));
  hyp = AugmentOptions();
  hyp.mixup = 1.5;
  EXPECT_THAT(CheckAugmentOptions(hyp).message(), HasSubstr("hyp.mixup"));
  hyp = AugmentOptions();
  hyp.scale = 1;
  EXPECT_THAT(CheckAugmentOptions(hyp).message(), HasSubstr("hyp.scale"));
  hyp = AugmentOptions();
  hyp.degrees = NAN;
  EXPECT_THAT(CheckAugmentOptions(hyp).message(), HasSubstr("hyp.degrees"));
}

TEST(AugmentHsvTest, ZeroGainsAreIdentity) {
  const Image original = Noise(37, 23, 5);
  Image im = original;
  AugmentOptions hyp;
  hyp.hsv_h = hyp.hsv_s = hyp.hsv_v = 0;
  SampleRng rng(0, 0, 0);
  AugmentHsv(&im, hyp, &rng);
  EXPECT_EQ(im.pixels, original.pixels);
}

TEST(AugmentHsvTest, GainsScaleHueSaturationAndValue) {
  Image grey = Solid(4, 4, 200, 200, 200);
  ApplyHsvGains(&grey, 1, 1, 0.5);  // value halved
  EXPECT_EQ(grey.at(1, 2)[0], 100);
  EXPECT_EQ(grey.at(1, 2)[2], 100);
  Image green = Solid(4, 4, 0, 255, 0);  // H = 60 (OpenCV's half degrees)
  ApplyHsvGains(&green, 2, 1, 1);        // H = 120: blue
  EXPECT_EQ(green.at(3, 3)[0], 0);
  EXPECT_EQ(green.at(3, 3)[1], 0);
  EXPECT_EQ(green.at(3, 3)[2], 255);
  Image red = Solid(4, 4, 255, 0, 0);
  ApplyHsvGains(&red, 1, 0, 1);  // no saturation: grey at the same value
  EXPECT_EQ(red.at(0, 0)[0], 255);
  EXPECT_EQ(red.at(0, 0)[1], 255);
  // Unit gains round-trip through 8-bit HSV within OpenCV's rounding.
  const Image noise = Noise(32, 32, 9);
  Image back = noise;
  ApplyHsvGains(&back, 1, 1, 1);
  int worst = 0;
  for (size_t i = 0; i < noise.pixels.size(); ++i) {
    worst = std::max(worst, std::abs(noise.pixels[i] - back.pixels[i]));
  }
  EXPECT_LE(worst, 4);
}

TEST(FlipTest, LeftRightAndUpDownMovePixels) {
  const Image original = Noise(5, 3, 1);
  Image im = original;
  FlipLeftRight(&im);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 5; ++x) {
      EXPECT_EQ(im.at(x, y)[1], original.at(4 - x, y)[1]);
    }
  }
  im = original;
  FlipUpDown(&im);
  EXPECT_EQ(im.at(2, 0)[0], original.at(2, 2)[0]);
  EXPECT_EQ(im.at(2, 1)[2], original.at(2, 1)[2]);
}

TEST(WarpImageTest, IdentityAndWholePixelShiftsAreExact) {
  const Image src = Noise(20, 10, 2);
  const Image same = WarpImage(src, {1, 0, 0, 0, 1, 0, 0, 0, 1}, 20, 10, 114);
  EXPECT_EQ(same.pixels, src.pixels);
  const Image moved = WarpImage(src, {1, 0, 3, 0, 1, 2, 0, 0, 1}, 20, 10, 114);
  EXPECT_EQ(moved.at(3, 2)[0], src.at(0, 0)[0]);
  EXPECT_EQ(moved.at(19, 9)[1], src.at(16, 7)[1]);
  EXPECT_EQ(moved.at(2, 5)[0], 114);  // left of the source: border
  EXPECT_EQ(moved.at(5, 1)[2], 114);
  const Image nothing = WarpImage(src, {0, 0, 0, 0, 0, 0, 0, 0, 1}, 4, 4, 7);
  EXPECT_EQ(nothing.at(1, 1)[0], 7);
}

TEST(ResizeTest, LongSideAndAreaMeans) {
  Image im(8, 4);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 8; ++x) im.at(x, y)[0] = static_cast<uint8_t>(x < 4 ? 0 : 200);
  }
  float gain = 0;
  const Image half = ResizeLongSide(im, 4, Interpolation::kArea, &gain);
  EXPECT_FLOAT_EQ(gain, 0.5f);
  ASSERT_EQ(half.width, 4);
  ASSERT_EQ(half.height, 2);
  EXPECT_EQ(half.at(1, 1)[0], 0);
  EXPECT_EQ(half.at(2, 0)[0], 200);
  // A 3-wide source to 2 columns: each output covers 1.5 source pixels.
  Image row(3, 1);
  row.at(0, 0)[0] = 0, row.at(1, 0)[0] = 90, row.at(2, 0)[0] = 180;
  const Image two = ResizeImage(row, 2.0 / 3, 2, 1, Interpolation::kArea);
  EXPECT_EQ(two.at(0, 0)[0], 30);   // (0 * 1 + 90 * 0.5) / 1.5
  EXPECT_EQ(two.at(1, 0)[0], 150);  // (90 * 0.5 + 180 * 1) / 1.5
  const Image same = ResizeLongSide(im, 8, Interpolation::kBilinear, &gain);
  EXPECT_EQ(same.pixels, im.pixels);
  // Odd shapes: the short side is ceil(side * gain), never above S.
  const Image odd =
      ResizeLongSide(Noise(300, 7, 3), 128, Interpolation::kBilinear, &gain);
  EXPECT_EQ(odd.width, 128);
  EXPECT_EQ(odd.height, 3);
}

TEST(LetterboxTest, CentresAsYolov5) {
  const Image src = Solid(64, 31, 1, 2, 3);
  Placement p;
  const Image out = Letterbox(src, 64, &p);
  // dh = 16.5: top = round(16.4) = 16, bottom 17.
  EXPECT_EQ(p.pad_x, 0);
  EXPECT_EQ(p.pad_y, 16);
  EXPECT_EQ(out.at(0, 15)[0], 114);
  EXPECT_EQ(out.at(0, 16)[0], 1);
  EXPECT_EQ(out.at(63, 46)[2], 3);
  EXPECT_EQ(out.at(63, 47)[2], 114);
}

TEST(BoxCandidateTest, Yolov5Thresholds) {
  const PixelBox before{10, 10, 30, 30, 0};
  EXPECT_TRUE(BoxCandidate(before, {0, 0, 20, 20, 0}, 1));
  EXPECT_FALSE(BoxCandidate(before, {0, 0, 2, 20, 0}, 1));  // a side of 2 px
  EXPECT_FALSE(BoxCandidate(before, {0, 0, 6, 6, 0}, 1));   // 9% of the area
  EXPECT_TRUE(BoxCandidate(before, {0, 0, 6, 6, 0}, 0.5));  // 36% of the scaled area
  EXPECT_FALSE(BoxCandidate({0, 0, 1000, 10, 0}, {0, 0, 1000, 9.9, 0}, 1));  // ratio 101
}

TEST(MixupTest, TruncatesLikeNumpy) {
  Image a = Solid(2, 2, 100, 0, 255);
  const Image b = Solid(2, 2, 201, 255, 0);
  Mixup(&a, b, 0.5);
  EXPECT_EQ(a.at(0, 0)[0], 150);  // 150.5
  EXPECT_EQ(a.at(0, 0)[1], 127);  // 127.5
  EXPECT_EQ(a.at(0, 0)[2], 127);
}

TEST(RandomPerspectiveTest, NoTransformKeepsImageAndBoxes) {
  AugmentOptions hyp;
  hyp.translate = hyp.scale = 0;
  const Image src = Noise(40, 30, 4);
  std::vector<PixelBox> boxes = {{5, 6, 25, 20, 3}};
  SampleRng rng(0, 0, 0);
  const Image out = RandomPerspective(src, 0, hyp, &rng, &boxes);
  EXPECT_EQ(out.pixels, src.pixels);
  ASSERT_EQ(boxes.size(), 1u);
  EXPECT_DOUBLE_EQ(boxes[0].x1, 5);
  EXPECT_DOUBLE_EQ(boxes[0].y2, 20);
  EXPECT_EQ(boxes[0].cls, 3);
}

TEST(MosaicCanvasTest, TilesMeetAtTheCentre) {
  const Image a = Solid(30, 20, 10, 0, 0), b = Solid(30, 20, 20, 0, 0),
              c = Solid(30, 20, 30, 0, 0), d = Solid(30, 20, 40, 0, 0);
  std::array<MosaicTile, 4> tiles = {MosaicTile{&a, {{0, 0, 30, 20, 1}}},
                                     MosaicTile{&b, {}}, MosaicTile{&c, {}},
                                     MosaicTile{&d, {{5, 5, 10, 10, 2}}}};
  std::vector<PixelBox> boxes;
  const Image canvas = MosaicCanvas(tiles, 32, 40, 25, &boxes);
  ASSERT_EQ(canvas.width, 64);
  EXPECT_EQ(canvas.at(39, 24)[0], 10);  // top left ends at the centre
  EXPECT_EQ(canvas.at(10, 24)[0], 10);
  EXPECT_EQ(canvas.at(9, 24)[0], 114);
  EXPECT_EQ(canvas.at(40, 24)[0], 20);
  EXPECT_EQ(canvas.at(39, 25)[0], 30);
  EXPECT_EQ(canvas.at(63, 44)[0], 40);  // bottom right: cropped at 2S
  EXPECT_EQ(canvas.at(40, 45)[0], 114);
  ASSERT_EQ(boxes.size(), 2u);
  EXPECT_DOUBLE_EQ(boxes[0].x1, 10);
  EXPECT_DOUBLE_EQ(boxes[0].y1, 5);
  EXPECT_DOUBLE_EQ(boxes[0].x2, 40);
  EXPECT_DOUBLE_EQ(boxes[1].x1, 45);
  EXPECT_DOUBLE_EQ(boxes[1].y1, 30);
}

}  // namespace
}  // namespace elastrun::trainer::detect
