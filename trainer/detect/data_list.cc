#include "trainer/detect/data_list.h"

#include <algorithm>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "trainer/detect/image.h"

namespace elastrun::trainer::detect {
namespace {

namespace fs = std::filesystem;

constexpr const char* kImageExtensions[] = {"bmp", "dng", "jpeg", "jpg", "mpo",
                                            "png", "tif", "tiff", "webp"};
constexpr char kExtensionList[] = ".bmp .dng .jpeg .jpg .mpo .png .tif .tiff .webp";
// A list of a million images is some 100 MB.
constexpr int64_t kMaxListBytes = int64_t{1} << 30;

std::string Resolve(const fs::path& folder, absl::string_view path) {
  const fs::path p{std::string(path)};
  return p.is_absolute() ? p.string() : (folder / p).lexically_normal().string();
}

// The last whitespace-separated token of `line` ("" for a blank line).
absl::string_view LastToken(absl::string_view line) {
  line = absl::StripTrailingAsciiWhitespace(line);
  const size_t space = line.find_last_of(" \t\v\f");
  return space == absl::string_view::npos ? line : line.substr(space + 1);
}

absl::Status ListFolder(const std::string& folder, SourceList* out) {
  std::error_code ec;
  fs::recursive_directory_iterator it(folder,
                                      fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string path = it->path().string();
    // A folder named like an image is listed too: the scan says what it is.
    if (!HasImageExtension(path)) continue;
    ImageSource source;
    source.image = path;
    source.label_file = LabelPathFor(path);
    out->images.push_back(std::move(source));
  }
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat(DisplayText(folder), ": cannot list: ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status ListTextFile(const std::string& file, int num_classes, SourceList* out) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileBytes(file, kMaxListBytes));
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  const bool annotated =
      std::any_of(lines.begin(), lines.end(),
                  [](absl::string_view line) { return IsBoxToken(LastToken(line)); });
  const fs::path folder = fs::path(file).parent_path();
  int64_t not_images = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const absl::string_view line = absl::StripAsciiWhitespace(lines[i]);
    if (line.empty()) continue;
    ImageSource source;
    if (annotated) {
      source.annotated = true;
      source.where = absl::StrCat(DisplayText(file), ":", i + 1);
      absl::StatusOr<AnnotationLine> parsed =
          ParseAnnotationLine(line, source.where, num_classes);
      if (absl::IsOutOfRange(parsed.status())) return parsed.status();
      if (!parsed.ok()) {
        out->warnings.push_back(absl::StrCat("WARNING: ignoring corrupt image/label: ",
                                             parsed.status().message()));
        ++out->corrupt;
        continue;
      }
      source.image = Resolve(folder, parsed->path);
      source.boxes = std::move(parsed->boxes);
    } else {
      // YOLOv5 keeps only the lines naming images.
      if (!HasImageExtension(line)) {
        ++not_images;
        continue;
      }
      source.image = Resolve(folder, line);
      source.label_file = LabelPathFor(source.image);
    }
    out->images.push_back(std::move(source));
  }
  if (not_images > 0) {
    out->warnings.push_back(absl::StrCat("WARNING: ", DisplayText(file), ": ", not_images,
                                         " line(s) naming no image (", kExtensionList,
                                         ") ignored"));
  }
  return absl::OkStatus();
}

}  // namespace

bool HasImageExtension(absl::string_view path) {
  const size_t dot = path.find_last_of("./");
  if (dot == absl::string_view::npos || path[dot] != '.') return false;
  const std::string extension = absl::AsciiStrToLower(path.substr(dot + 1));
  return std::any_of(std::begin(kImageExtensions), std::end(kImageExtensions),
                     [&](const char* e) { return extension == e; });
}

std::string LabelPathFor(absl::string_view image_path) {
  std::string path(image_path);
  const size_t images = path.rfind("/images/");
  if (images != std::string::npos) path.replace(images, 8, "/labels/");
  const size_t dot = path.find_last_of("./");
  if (dot != std::string::npos && path[dot] == '.') path.resize(dot);
  return path + ".txt";
}

absl::StatusOr<SourceList> ListSource(const std::string& source, int num_classes) {
  std::error_code ec;
  const fs::file_status status = fs::status(source, ec);
  if (!fs::exists(status)) {
    return absl::NotFoundError(absl::StrCat(DisplayText(source), ": does not exist"));
  }
  SourceList out;
  if (fs::is_directory(status)) {
    RETURN_IF_ERROR(ListFolder(source, &out));
  } else if (HasImageExtension(source)) {
    ImageSource one;
    one.image = source;
    one.label_file = LabelPathFor(source);
    out.images.push_back(std::move(one));
  } else {
    RETURN_IF_ERROR(ListTextFile(source, num_classes, &out));
  }
  if (out.images.empty() && out.corrupt == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        DisplayText(source), ": no images found (looked for ", kExtensionList,
        fs::is_directory(status) ? " in it and its subfolders)" : " in its lines)"));
  }
  return out;
}

}  // namespace elastrun::trainer::detect
