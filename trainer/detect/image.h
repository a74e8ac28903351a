// Image files for the detector, torch-free: what a file's header says
// (format, size) without decoding it, decoding JPEG and PNG (BMP and GIF
// too, through stb_image) into 8-bit RGB, and encoding JPEG and PNG.
//
// Decoding is a pure function of the bytes: the same file gives the same
// pixels in any thread, any number of times. Every function is safe to call
// from several threads at once.
//
// JPEG files carry an EXIF orientation (a phone's portrait photo is stored
// sideways): sizes and pixels are those of the image as displayed, as
// YOLOv5 sees them (PIL's exif_size, OpenCV's imread), so labels drawn on
// the displayed image fit.
#ifndef ELASTRUN_TRAINER_DETECT_IMAGE_H_
#define ELASTRUN_TRAINER_DETECT_IMAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace elastrun::trainer::detect {

// What a file's first bytes say it is. Only kJpeg, kPng, kBmp and kGif
// decode; the others are named in errors.
enum class ImageFormat { kUnknown, kJpeg, kPng, kBmp, kGif, kTiff, kWebp };

// "JPEG", "PNG", ... ("unknown").
const char* FormatName(ImageFormat format);

// The format from the magic bytes at the start of `head` (any length).
ImageFormat SniffFormat(absl::string_view head);

// Images with more pixels than this are refused before any pixel is
// decoded (a tiny PNG can claim to be 100000 x 100000).
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 27;

// An 8-bit RGB image, rows top to bottom, pixels left to right, three bytes
// each (HWC). `pixels` holds exactly width * height * 3 bytes.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;

  Image() = default;
  // A width x height image filled with zero (black).
  Image(int width, int height);
  uint8_t* at(int x, int y) { return &pixels[(static_cast<size_t>(y) * width + x) * 3]; }
  const uint8_t* at(int x, int y) const {
    return &pixels[(static_cast<size_t>(y) * width + x) * 3];
  }
};

struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  // The size as displayed: a JPEG's EXIF orientation 5 to 8 swaps the
  // stored width and height.
  int width = 0;
  int height = 0;
  // The JPEG's EXIF orientation, 1 (as stored) to 8; 1 for other formats.
  int orientation = 1;
};

// Reads the header of the image file `path` (not its pixels) and checks its
// end: a JPEG must end with the end-of-image marker and a PNG with its IEND
// chunk, or it was cut short. Errors name `path` and what is wrong:
// NotFound (no such file), FailedPrecondition (a directory or another
// non-file: "is a directory, not a file"), DataLoss ("empty file",
// "not an image (starts with 3c 68 74 6d)", "corrupt JPEG: <reason>",
// "truncated PNG: it does not end with an IEND chunk", a zero or negative size),
// Unimplemented (TIFF or WebP: convert to JPEG or PNG), ResourceExhausted
// (more than kMaxImagePixels).
absl::StatusOr<ImageInfo> ReadImageInfo(const std::string& path);

// Decodes a whole image (any of the formats above) to RGB: grey is
// replicated, alpha dropped, 16-bit samples reduced to 8, a JPEG's EXIF
// orientation applied. `name` only labels errors (a path). Errors as for
// ReadImageInfo, and DataLoss for pixel data that does not decode.
absl::StatusOr<Image> DecodeImage(absl::string_view bytes, const std::string& name);

// Reads and decodes the file `path` (ReadImageInfo's checks, then
// DecodeImage).
absl::StatusOr<Image> ReadImage(const std::string& path);

// The bytes of `image` as a PNG (lossless) or a JPEG of `jpeg_quality`
// (1-100; chroma halved in both directions up to 90, kept whole above). InvalidArgument
// for another format, an empty image, a pixel buffer of the wrong size or a quality out
// of range. Deterministic: the same image gives the same bytes.
absl::StatusOr<std::string> EncodeImage(const Image& image, ImageFormat format,
                                        int jpeg_quality = 95);

// The whole file `path`, at most `max_bytes` long. Errors name the path:
// NotFound (no such file), FailedPrecondition (a directory: "is a
// directory, not a file"; another non-file; unreadable),
// ResourceExhausted (larger than max_bytes).
absl::StatusOr<std::string> ReadFileBytes(const std::string& path, int64_t max_bytes);

// Writes `bytes` to `path` (created or replaced). Errors name the path and
// the system's reason.
absl::Status WriteFileBytes(const std::string& path, absl::string_view bytes);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_IMAGE_H_
