#include "trainer/detect/image.h"

#include <jpeglib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/test_files.h"

namespace elastrun::trainer::detect {
namespace {

namespace fs = std::filesystem;
using ::elastrun::trainer::testing::RunCommand;
using ::elastrun::trainer::testing::TestDir;
using ::testing::HasSubstr;

// The pattern data_reference.py draws.
Image Pattern(int w, int h) {
  Image image(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = image.at(x, y);
      p[0] = static_cast<uint8_t>((37 * x + 11 * y) % 256);
      p[1] = static_cast<uint8_t>((x * y) % 256);
      p[2] = static_cast<uint8_t>(((255 - 13 * x) % 256 + 256) % 256);
    }
  }
  return image;
}

// A PNG written by the Python reference (its own zlib-and-struct writer).
std::string ReferencePng(const std::string& dir, int w, int h, const std::string& kind) {
  const std::string path = absl::StrCat(dir, "/ref_", kind, "_", w, "x", h, ".png");
  int status = 0;
  const std::string out =
      RunCommand(absl::StrCat("/usr/bin/python3 ", ELASTRUN_DETECT_DATA_REFERENCE,
                              " png ", path, " ", w, " ", h, " ", kind),
                 &status);
  EXPECT_EQ(status, 0) << out;
  return path;
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// libjpeg-turbo's JPEG of `image`: 4:4:4, so decoders differ only by
// rounding in the inverse DCT.
std::string LibjpegEncode(const Image& image, int quality) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = image.width;
  c.image_height = image.height;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  for (int i = 0; i < 3; ++i)
    c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(image.at(0, static_cast<int>(c.next_scanline)));
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::string out(reinterpret_cast<char*>(buffer), size);
  std::free(buffer);
  return out;
}

Image LibjpegDecode(const std::string& bytes) {
  jpeg_decompress_struct d;
  jpeg_error_mgr err;
  d.err = jpeg_std_error(&err);
  jpeg_create_decompress(&d);
  jpeg_mem_src(&d, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  jpeg_read_header(&d, TRUE);
  d.out_color_space = JCS_RGB;
  jpeg_start_decompress(&d);
  Image image(static_cast<int>(d.output_width), static_cast<int>(d.output_height));
  while (d.output_scanline < d.output_height) {
    JSAMPROW row = image.at(0, static_cast<int>(d.output_scanline));
    jpeg_read_scanlines(&d, &row, 1);
  }
  jpeg_finish_decompress(&d);
  jpeg_destroy_decompress(&d);
  return image;
}

int MaxDifference(const Image& a, const Image& b) {
  int most = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i)
    most = std::max(most, std::abs(a.pixels[i] - b.pixels[i]));
  return most;
}

TEST(ImageTest, DecodesReferencePngsToKnownPixels) {
  const std::string dir = TestDir();
  const Image expected = Pattern(37, 23);
  absl::StatusOr<Image> rgb = ReadImage(ReferencePng(dir, 37, 23, "rgb"));
  ASSERT_TRUE(rgb.ok()) << rgb.status();
  EXPECT_EQ(rgb->width, 37);
  EXPECT_EQ(rgb->height, 23);
  EXPECT_EQ(rgb->pixels, expected.pixels);
  // 16-bit samples v * 257 come back as v; alpha is dropped.
  for (const char* kind : {"rgb16", "rgba"}) {
    absl::StatusOr<Image> image = ReadImage(ReferencePng(dir, 37, 23, kind));
    ASSERT_TRUE(image.ok()) << kind << ": " << image.status();
    EXPECT_EQ(image->pixels, expected.pixels) << kind;
  }
  absl::StatusOr<Image> grey = ReadImage(ReferencePng(dir, 37, 23, "grey"));
  ASSERT_TRUE(grey.ok()) << grey.status();
  for (int y = 0; y < 23; ++y) {
    for (int x = 0; x < 37; ++x) {
      const uint8_t* p = grey->at(x, y);
      ASSERT_TRUE(p[0] == expected.at(x, y)[0] && p[1] == p[0] && p[2] == p[0])
          << x << "," << y;
    }
  }
  absl::StatusOr<ImageInfo> info = ReadImageInfo(ReferencePng(dir, 37, 23, "rgb"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->format, ImageFormat::kPng);
  EXPECT_EQ(info->width, 37);
  EXPECT_EQ(info->height, 23);
}

TEST(ImageTest, DecodesJpegAsLibjpegDoes) {
  const Image original = Pattern(64, 48);
  const std::string jpeg = LibjpegEncode(original, 95);
  absl::StatusOr<Image> ours = DecodeImage(jpeg, "p.jpg");
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_EQ(ours->width, 64);
  ASSERT_EQ(ours->height, 48);
  EXPECT_LE(MaxDifference(*ours, LibjpegDecode(jpeg)), 2);
  // A flat colour survives JPEG within a level or two.
  Image flat(24, 16);
  for (size_t i = 0; i < flat.pixels.size(); i += 3) {
    flat.pixels[i] = 200;
    flat.pixels[i + 1] = 100;
    flat.pixels[i + 2] = 50;
  }
  absl::StatusOr<Image> decoded = DecodeImage(LibjpegEncode(flat, 100), "flat.jpg");
  ASSERT_TRUE(decoded.ok());
  EXPECT_LE(MaxDifference(*decoded, flat), 2);
}

TEST(ImageTest, EncodesPngLosslesslyAndJpegThatLibjpegReads) {
  const Image original = Pattern(50, 30);
  absl::StatusOr<std::string> png = EncodeImage(original, ImageFormat::kPng);
  ASSERT_TRUE(png.ok());
  absl::StatusOr<Image> back = DecodeImage(*png, "x.png");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pixels, original.pixels);
  absl::StatusOr<std::string> jpeg = EncodeImage(original, ImageFormat::kJpeg, 95);
  ASSERT_TRUE(jpeg.ok());
  EXPECT_EQ(SniffFormat(*jpeg), ImageFormat::kJpeg);
  back = DecodeImage(*jpeg, "x.jpg");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_LE(MaxDifference(*back, LibjpegDecode(*jpeg)), 2);
  EXPECT_EQ(*EncodeImage(original, ImageFormat::kJpeg, 95), *jpeg);  // deterministic
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeImage(original, ImageFormat::kBmp).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(EncodeImage(original, ImageFormat::kJpeg, 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeImage(Image(), ImageFormat::kPng).status()));
}

TEST(ImageTest, SameBytesInEveryThread) {
  const std::string jpeg = LibjpegEncode(Pattern(160, 120), 90);
  const std::vector<uint8_t> first = DecodeImage(jpeg, "a.jpg")->pixels;
  std::vector<int> mismatches(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i)
        mismatches[t] += DecodeImage(jpeg, "a.jpg")->pixels != first;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// `jpeg` with an APP1 EXIF segment of orientation `orientation` after SOI,
// in `little` (II) or big-endian (MM) TIFF order.
std::string WithOrientation(const std::string& jpeg, int orientation, bool little) {
  const auto u16 = [&](int v) {
    return little ? std::string{static_cast<char>(v & 255), static_cast<char>(v >> 8)}
                  : std::string{static_cast<char>(v >> 8), static_cast<char>(v & 255)};
  };
  const auto u32 = [&](int v) { return little ? u16(v) + u16(0) : u16(0) + u16(v); };
  std::string tiff = (little ? "II" : "MM") + u16(42) + u32(8);
  tiff += u16(1) + u16(0x0112) + u16(3) + u32(1) + u16(orientation) + u16(0) + u32(0);
  const std::string body = std::string("Exif\0\0", 6) + tiff;
  const int length = static_cast<int>(body.size()) + 2;
  const std::string segment = std::string("\xff\xe1") + static_cast<char>(length >> 8) +
                              static_cast<char>(length & 255) + body;
  return jpeg.substr(0, 2) + segment + jpeg.substr(2);
}

TEST(ImageTest, AppliesExifOrientation) {
  // 32x16 in four flat quadrants: red, green / blue, white.
  Image stored(32, 16);
  const uint8_t colours[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}};
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 32; ++x)
      std::copy_n(colours[(y >= 8) * 2 + (x >= 16)], 3, stored.at(x, y));
  }
  const std::string jpeg = *EncodeImage(stored, ImageFormat::kJpeg, 100);
  // The displayed corners (top-left, top-right, bottom-left, bottom-right)
  // as quadrant numbers, per orientation, from the EXIF specification.
  const int corners[9][4] = {{},           {0, 1, 2, 3}, {1, 0, 3, 2},
                             {3, 2, 1, 0}, {2, 3, 0, 1}, {0, 2, 1, 3},
                             {2, 0, 3, 1}, {3, 1, 2, 0}, {1, 3, 0, 2}};
  const std::string dir = TestDir();
  for (int orientation = 1; orientation <= 8; ++orientation) {
    const std::string bytes = WithOrientation(jpeg, orientation, orientation % 2 == 0);
    absl::StatusOr<Image> image = DecodeImage(bytes, "o.jpg");
    ASSERT_TRUE(image.ok()) << image.status();
    const bool swapped = orientation >= 5;
    ASSERT_EQ(image->width, swapped ? 16 : 32) << orientation;
    ASSERT_EQ(image->height, swapped ? 32 : 16) << orientation;
    const int w = image->width, h = image->height;
    const int at[4][2] = {{2, 2}, {w - 3, 2}, {2, h - 3}, {w - 3, h - 3}};
    for (int k = 0; k < 4; ++k) {
      const uint8_t* p = image->at(at[k][0], at[k][1]);
      const uint8_t* want = colours[corners[orientation][k]];
      for (int c = 0; c < 3; ++c) {
        EXPECT_NEAR(p[c], want[c], 8) << "orientation " << orientation << " corner " << k;
      }
    }
    const std::string path = absl::StrCat(dir, "/o", orientation, ".jpg");
    WriteAll(path, bytes);
    absl::StatusOr<ImageInfo> info = ReadImageInfo(path);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->orientation, orientation);
    EXPECT_EQ(info->width, w);
    EXPECT_EQ(info->height, h);
  }
}

TEST(ImageTest, BadFilesAreClearErrors) {
  const std::string dir = TestDir();
  const std::string jpeg = LibjpegEncode(Pattern(40, 30), 90);
  const std::string png = *EncodeImage(Pattern(40, 30), ImageFormat::kPng);
  struct Case {
    std::string name;
    std::string bytes;
    absl::StatusCode code;
    std::string message;
  };
  std::string bad_header = jpeg;
  for (size_t i = 6; i < 200; ++i) bad_header[i] = static_cast<char>(0x55);
  std::string huge = png;  // IHDR claims 12000 x 12000
  const std::string side("\x00\x00\x2e\xe0", 4);
  huge.replace(16, 4, side);
  huge.replace(20, 4, side);
  const std::vector<Case> cases = {
      {"cut.jpg", jpeg.substr(0, jpeg.size() / 2), absl::StatusCode::kDataLoss,
       "truncated JPEG: it does not end with the end-of-image marker ff d9"},
      {"cut.png", png.substr(0, png.size() - 20), absl::StatusCode::kDataLoss,
       "truncated PNG: it does not end with an IEND chunk"},
      {"header.jpg", bad_header, absl::StatusCode::kDataLoss, "corrupt JPEG: "},
      {"empty.jpg", "", absl::StatusCode::kDataLoss,
       "empty file (0 bytes), not an image"},
      {"text.png", "<html>hello</html>", absl::StatusCode::kDataLoss,
       "not an image (starts with 3c 68 74 6d)"},
      {"scan.tif", std::string("II*\0\x08\0\0\0", 8), absl::StatusCode::kUnimplemented,
       "TIFF is not supported: convert it to JPEG or PNG"},
      {"huge.png", huge, absl::StatusCode::kResourceExhausted,
       "12000x12000 is more than 134217728 pixels"},
  };
  for (const Case& c : cases) {
    const std::string path = dir + "/" + c.name;
    WriteAll(path, c.bytes);
    absl::StatusOr<ImageInfo> info = ReadImageInfo(path);
    EXPECT_EQ(info.status().code(), c.code) << c.name << ": " << info.status();
    EXPECT_THAT(info.status().message(), HasSubstr(path + ": " + c.message)) << c.name;
    absl::StatusOr<Image> image = ReadImage(path);
    EXPECT_EQ(image.status().code(), c.code) << c.name << ": " << image.status();
    EXPECT_THAT(image.status().message(), HasSubstr(c.message)) << c.name;
  }
  absl::StatusOr<ImageInfo> zero = ReadImageInfo(ReferencePng(dir, 0, 5, "rgb"));
  EXPECT_TRUE(absl::IsDataLoss(zero.status())) << zero.status();
  fs::create_directories(dir + "/folder.jpg");
  absl::StatusOr<ImageInfo> folder = ReadImageInfo(dir + "/folder.jpg");
  EXPECT_TRUE(absl::IsFailedPrecondition(folder.status()));
  EXPECT_THAT(folder.status().message(),
              HasSubstr("folder.jpg: is a directory, not a file"));
  EXPECT_TRUE(absl::IsNotFound(ReadImageInfo(dir + "/none.jpg").status()));
}

TEST(ImageTest, NonUtf8NamesWork) {
  const std::string dir = TestDir();
  const std::string path = dir + "/caf\xe9\xff.png";
  ASSERT_TRUE(
      WriteFileBytes(path, *EncodeImage(Pattern(12, 10), ImageFormat::kPng)).ok());
  absl::StatusOr<ImageInfo> info = ReadImageInfo(path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 12);
  EXPECT_TRUE(ReadImage(path).ok());
}

// No input crashes: every cut and many flipped bytes of a JPEG and a PNG
// give an image or an error.
TEST(ImageTest, DamagedFilesNeverCrash) {
  const std::string dir = TestDir();
  uint64_t state = 12345;
  const auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  for (const std::string& good : {LibjpegEncode(Pattern(33, 21), 80),
                                  *EncodeImage(Pattern(33, 21), ImageFormat::kPng)}) {
    for (size_t n = 0; n <= good.size(); n += 7) {
      (void)DecodeImage(good.substr(0, n), "cut");
    }
    for (int trial = 0; trial < 400; ++trial) {
      std::string bad = good;
      for (int k = 0; k < 1 + trial % 4; ++k)
        bad[next() % bad.size()] = static_cast<char>(next());
      absl::StatusOr<Image> image = DecodeImage(bad, "flipped");
      if (image.ok()) {
        EXPECT_EQ(image->pixels.size(),
                  static_cast<size_t>(image->width) * image->height * 3);
      }
      const std::string path = dir + "/flipped";
      WriteAll(path, bad);
      (void)ReadImageInfo(path);
    }
  }
}

}  // namespace
}  // namespace elastrun::trainer::detect
