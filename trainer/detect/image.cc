#include "trainer/detect/image.h"

#include <fcntl.h>
#include <stb_image.h>
#include <stb_image_write.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace elastrun::trainer::detect {
namespace {

// Read before anything else: the magic bytes, and a JPEG's EXIF
// orientation, which sits in the first entries of the first segments.
// Header and decode look at the same bytes, so they agree on it.
constexpr size_t kHeadBytes = 16 * 1024;
// stb_image takes an int length.
constexpr int64_t kMaxFileBytes = int64_t{1} << 30;

uint32_t Get16(absl::string_view s, size_t at, bool little) {
  const auto b = [&](size_t i) {
    return static_cast<uint32_t>(static_cast<uint8_t>(s[at + i]));
  };
  return little ? b(0) | b(1) << 8 : b(0) << 8 | b(1);
}

uint32_t Get32(absl::string_view s, size_t at, bool little) {
  return little ? Get16(s, at, true) | Get16(s, at + 2, true) << 16
                : Get16(s, at, false) << 16 | Get16(s, at + 2, false);
}

// The Orientation tag (0x0112) of IFD0 in a TIFF block (EXIF's body); 1
// when absent or malformed.
int TiffOrientation(absl::string_view tiff) {
  if (tiff.size() < 8) return 1;
  bool little;
  if (tiff.substr(0, 2) == "II") {
    little = true;
  } else if (tiff.substr(0, 2) == "MM") {
    little = false;
  } else {
    return 1;
  }
  if (Get16(tiff, 2, little) != 42) return 1;
  const size_t ifd = Get32(tiff, 4, little);
  if (ifd > tiff.size() - 2) return 1;
  const size_t entries = Get16(tiff, ifd, little);
  for (size_t i = 0; i < entries; ++i) {
    const size_t e = ifd + 2 + 12 * i;
    if (e + 12 > tiff.size()) break;
    if (Get16(tiff, e, little) != 0x0112) continue;
    const uint32_t type = Get16(tiff, e + 2, little);  // 3 = SHORT
    const uint32_t value = Get16(tiff, e + 8, little);
    return type == 3 && value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

// A JPEG's EXIF orientation from its first bytes: the APP1 "Exif" segment
// comes before the first scan. 1 when there is none.
int JpegOrientation(absl::string_view head) {
  size_t pos = 2;  // after SOI
  while (pos + 4 <= head.size()) {
    if (static_cast<uint8_t>(head[pos]) != 0xFF) return 1;
    const uint8_t marker = static_cast<uint8_t>(head[pos + 1]);
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return 1;  // scan or end: no EXIF
    const size_t length = Get16(head, pos + 2, false);
    if (length < 2) return 1;
    const size_t body = pos + 4;
    if (marker == 0xE1 && length >= 8 && body + 6 <= head.size() &&
        head.substr(body, 6) == absl::string_view("Exif\0\0", 6)) {
      return TiffOrientation(head.substr(body + 6, length - 8));
    }
    pos += 2 + length;
  }
  return 1;
}

// The displayed image of `stored` under EXIF orientation 2-8 (1: itself).
Image Orient(Image stored, int orientation) {
  if (orientation <= 1 || orientation > 8) return stored;
  const int w = stored.width, h = stored.height;
  const bool swap = orientation >= 5;
  Image out(swap ? h : w, swap ? w : h);
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;
      switch (orientation) {
        case 2:
          sx = w - 1 - x;
          break;  // mirrored
        case 3:
          sx = w - 1 - x;
          sy = h - 1 - y;
          break;  // 180
        case 4:
          sy = h - 1 - y;
          break;  // flipped
        case 5:
          sx = y;
          sy = x;
          break;  // transposed
        case 6:
          sx = y;
          sy = h - 1 - x;
          break;  // 90 clockwise
        case 7:
          sx = w - 1 - y;
          sy = h - 1 - x;
          break;  // transversed
        case 8:
          sx = w - 1 - y;
          sy = x;
          break;  // 90 anticlockwise
      }
      std::memcpy(out.at(x, y), stored.at(sx, sy), 3);
    }
  }
  return out;
}

std::string HexBytes(absl::string_view s, size_t n) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < n; ++i) {
    absl::StrAppend(&out, i ? " " : "",
                    absl::StrFormat("%02x", static_cast<uint8_t>(s[i])));
  }
  return out;
}

// Whether the file's format is one we decode, from its first bytes.
absl::StatusOr<ImageFormat> CheckFormat(absl::string_view head, const std::string& name) {
  const ImageFormat format = SniffFormat(head);
  switch (format) {
    case ImageFormat::kUnknown:
      return absl::DataLossError(
          absl::StrCat(name, ": not an image (starts with ", HexBytes(head, 4), ")"));
    case ImageFormat::kTiff:
    case ImageFormat::kWebp:
      return absl::UnimplementedError(
          absl::StrCat(name, ": ", FormatName(format),
                       " is not supported: convert it to JPEG or PNG"));
    default:
      return format;
  }
}

// A JPEG or PNG cut short lacks its last bytes; stb_image would decode the
// start of a truncated JPEG without a word.
absl::Status CheckEnd(ImageFormat format, absl::string_view tail,
                      const std::string& name) {
  static constexpr char kIend[] = "\0\0\0\0IEND\xae\x42\x60\x82";
  if (format == ImageFormat::kJpeg &&
      (tail.size() < 2 || tail.substr(tail.size() - 2) != "\xff\xd9")) {
    return absl::DataLossError(absl::StrCat(
        name, ": truncated JPEG: it does not end with the end-of-image marker ff d9"));
  }
  if (format == ImageFormat::kPng &&
      (tail.size() < 12 ||
       tail.substr(tail.size() - 12) != absl::string_view(kIend, 12))) {
    return absl::DataLossError(
        absl::StrCat(name, ": truncated PNG: it does not end with an IEND chunk"));
  }
  return absl::OkStatus();
}

absl::Status CheckSize(ImageFormat format, int width, int height,
                       const std::string& name) {
  if (width <= 0 || height <= 0) {
    return absl::DataLossError(absl::StrCat(name, ": corrupt ", FormatName(format),
                                            ": size ", width, "x", height));
  }
  if (int64_t{width} * height > kMaxImagePixels) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name, ": ", width, "x", height, " is more than ", kMaxImagePixels, " pixels"));
  }
  return absl::OkStatus();
}

absl::Status CorruptError(ImageFormat format, const std::string& name) {
  const char* reason = stbi_failure_reason();
  return absl::DataLossError(absl::StrCat(name, ": corrupt ", FormatName(format), ": ",
                                          reason ? reason : "cannot decode"));
}

// An open regular file, closed on destruction.
struct File {
  int fd = -1;
  int64_t size = 0;
  ~File() {
    if (fd >= 0) ::close(fd);
  }
};

absl::Status OpenFile(const std::string& path, int64_t max_bytes, File* file) {
  file->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot open: ", std::strerror(error)));
  }
  struct stat st;
  if (::fstat(file->fd, &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": is a directory, not a file"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": is not a regular file"));
  }
  if (st.st_size > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": larger than ", max_bytes, " bytes"));
  }
  file->size = st.st_size;
  return absl::OkStatus();
}

absl::Status EmptyImageError(const std::string& name) {
  return absl::DataLossError(absl::StrCat(name, ": empty file (0 bytes), not an image"));
}

// `n` bytes (fewer at the end of the file) from `offset`.
absl::StatusOr<std::string> ReadAt(const File& file, int64_t offset, size_t n,
                                   const std::string& path) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(file.fd, out.data() + got, n - got, offset + got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": cannot read: ", std::strerror(errno)));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

// stb_image's reader over a File, for headers that lie beyond kHeadBytes.
struct Reader {
  const File* file;
  int64_t pos = 0;
  static int Read(void* user, char* data, int size) {
    auto* r = static_cast<Reader*>(user);
    const ssize_t got = ::pread(r->file->fd, data, static_cast<size_t>(size), r->pos);
    if (got <= 0) return 0;
    r->pos += got;
    return static_cast<int>(got);
  }
  static void Skip(void* user, int n) { static_cast<Reader*>(user)->pos += n; }
  static int Eof(void* user) {
    auto* r = static_cast<Reader*>(user);
    return r->pos >= r->file->size;
  }
};

void AppendBytes(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data),
                                             static_cast<size_t>(size));
}

}  // namespace

Image::Image(int width, int height)
    : width(width), height(height), pixels(static_cast<size_t>(width) * height * 3, 0) {}

const char* FormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kBmp:
      return "BMP";
    case ImageFormat::kGif:
      return "GIF";
    case ImageFormat::kTiff:
      return "TIFF";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

ImageFormat SniffFormat(absl::string_view head) {
  const auto starts = [&](absl::string_view magic) {
    return head.substr(0, magic.size()) == magic;
  };
  if (starts("\xff\xd8\xff")) return ImageFormat::kJpeg;
  if (starts("\x89PNG\r\n\x1a\n")) return ImageFormat::kPng;
  if (starts("BM")) return ImageFormat::kBmp;
  if (starts("GIF87a") || starts("GIF89a")) return ImageFormat::kGif;
  if (starts(absl::string_view("II*\0", 4)) || starts(absl::string_view("MM\0*", 4))) {
    return ImageFormat::kTiff;
  }
  if (starts("RIFF") && head.size() >= 12 && head.substr(8, 4) == "WEBP")
    return ImageFormat::kWebp;
  return ImageFormat::kUnknown;
}

absl::StatusOr<ImageInfo> ReadImageInfo(const std::string& path) {
  File file;
  RETURN_IF_ERROR(OpenFile(path, kMaxFileBytes, &file));
  if (file.size == 0) return EmptyImageError(path);
  ASSIGN_OR_RETURN(const std::string head, ReadAt(file, 0, kHeadBytes, path));
  ImageInfo info;
  ASSIGN_OR_RETURN(info.format, CheckFormat(head, path));
  ASSIGN_OR_RETURN(const std::string tail,
                   ReadAt(file, std::max<int64_t>(file.size - 12, 0), 12, path));
  RETURN_IF_ERROR(CheckEnd(info.format, tail, path));
  int channels = 0;
  Reader reader{&file};
  const stbi_io_callbacks callbacks{&Reader::Read, &Reader::Skip, &Reader::Eof};
  if (!stbi_info_from_callbacks(&callbacks, &reader, &info.width, &info.height,
                                &channels)) {
    return CorruptError(info.format, path);
  }
  RETURN_IF_ERROR(CheckSize(info.format, info.width, info.height, path));
  if (info.format == ImageFormat::kJpeg) info.orientation = JpegOrientation(head);
  if (info.orientation >= 5) std::swap(info.width, info.height);
  return info;
}

absl::StatusOr<Image> DecodeImage(absl::string_view bytes, const std::string& name) {
  if (bytes.empty()) return EmptyImageError(name);
  if (static_cast<int64_t>(bytes.size()) > kMaxFileBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name, ": larger than ", kMaxFileBytes, " bytes"));
  }
  ASSIGN_OR_RETURN(const ImageFormat format, CheckFormat(bytes, name));
  RETURN_IF_ERROR(CheckEnd(format, bytes, name));
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  const int length = static_cast<int>(bytes.size());
  int width = 0, height = 0, channels = 0;
  if (!stbi_info_from_memory(data, length, &width, &height, &channels)) {
    return CorruptError(format, name);
  }
  RETURN_IF_ERROR(CheckSize(format, width, height, name));
  stbi_uc* pixels = stbi_load_from_memory(data, length, &width, &height, &channels, 3);
  if (pixels == nullptr) return CorruptError(format, name);
  absl::Cleanup free_pixels = [pixels] { stbi_image_free(pixels); };
  Image image;
  image.width = width;
  image.height = height;
  image.pixels.assign(pixels, pixels + static_cast<size_t>(width) * height * 3);
  if (format != ImageFormat::kJpeg) return image;
  return Orient(std::move(image), JpegOrientation(bytes.substr(0, kHeadBytes)));
}

absl::StatusOr<Image> ReadImage(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileBytes(path, kMaxFileBytes));
  return DecodeImage(bytes, path);
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path, int64_t max_bytes) {
  File file;
  RETURN_IF_ERROR(OpenFile(path, max_bytes, &file));
  return ReadAt(file, 0, static_cast<size_t>(file.size), path);
}

absl::StatusOr<std::string> EncodeImage(const Image& image, ImageFormat format,
                                        int jpeg_quality) {
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return absl::InvalidArgumentError(absl::StrCat("cannot encode a ", image.width, "x",
                                                   image.height, " image holding ",
                                                   image.pixels.size(), " bytes"));
  }
  if (image.width > INT_MAX / 3) {
    return absl::InvalidArgumentError(absl::StrCat("image too wide: ", image.width));
  }
  std::string out;
  int ok = 0;
  if (format == ImageFormat::kPng) {
    ok = stbi_write_png_to_func(&AppendBytes, &out, image.width, image.height, 3,
                                image.pixels.data(), image.width * 3);
  } else if (format == ImageFormat::kJpeg) {
    if (jpeg_quality < 1 || jpeg_quality > 100) {
      return absl::InvalidArgumentError(
          absl::StrCat("JPEG quality ", jpeg_quality, " is not in 1-100"));
    }
    ok = stbi_write_jpg_to_func(&AppendBytes, &out, image.width, image.height, 3,
                                image.pixels.data(), jpeg_quality);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode ", FormatName(format), ": only JPEG and PNG"));
  }
  if (!ok)
    return absl::InternalError(absl::StrCat(FormatName(format), " encoding failed"));
  return out;
}

absl::Status WriteFileBytes(const std::string& path, absl::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t r = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(r);
  }
  std::move(close_fd).Cancel();
  if (::close(fd) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace elastrun::trainer::detect
