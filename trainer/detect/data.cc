#include "trainer/detect/data.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "trainer/detect/data_list.h"
#include "trainer/detect/image.h"

namespace elastrun::trainer::detect {
namespace {

// YOLOv5 refuses images below 10 pixels a side.
constexpr int kMinSide = 10;
constexpr int64_t kMaxLabelBytes = 64 << 20;
constexpr int kMaxThreads = 8;

// What scanning one image gave.
struct Outcome {
  bool usable = false;
  ImageEntry entry;
  ScanCounts counts;
  std::vector<std::string> warnings;
  // A class >= nc: the whole load stops.
  absl::Status fatal;
};

Outcome Corrupt(const absl::Status& status) {
  Outcome o;
  o.counts.corrupt = 1;
  o.warnings.push_back(DisplayText(
      absl::StrCat("WARNING: ignoring corrupt image/label: ", status.message())));
  return o;
}

// The labels of `source`, counting what was found into `counts`.
absl::StatusOr<ImageLabels> ReadLabels(const ImageSource& source, int width, int height,
                                       int num_classes, ScanCounts* counts) {
  if (source.annotated) {
    ++(source.boxes.empty() ? counts->empty : counts->found);
    return PixelBoxesToLabels(source.boxes, width, height, source.where);
  }
  absl::StatusOr<std::string> text = ReadFileBytes(source.label_file, kMaxLabelBytes);
  if (absl::IsNotFound(text.status())) {
    ++counts->missing;
    return ImageLabels{};
  }
  if (!text.ok()) return text.status();
  ++counts->found;
  absl::StatusOr<ImageLabels> labels =
      ParseYoloLabels(*text, source.label_file, num_classes);
  if (labels.ok() && labels->labels.empty()) ++counts->empty;
  return labels;
}

Outcome ScanOne(const ImageSource& source, int num_classes, bool decode) {
  absl::StatusOr<ImageInfo> info = ReadImageInfo(source.image);
  if (!info.ok()) return Corrupt(info.status());
  if (decode) {
    absl::StatusOr<Image> image = ReadImage(source.image);
    if (!image.ok()) return Corrupt(image.status());
  }
  if (info->width < kMinSide || info->height < kMinSide) {
    return Corrupt(absl::DataLossError(absl::StrCat(source.image, ": image size ",
                                                    info->width, "x", info->height,
                                                    " is below ", kMinSide, " pixels")));
  }
  Outcome o;
  absl::StatusOr<ImageLabels> labels =
      ReadLabels(source, info->width, info->height, num_classes, &o.counts);
  if (absl::IsOutOfRange(labels.status())) {
    o.fatal = labels.status();
    return o;
  }
  if (!labels.ok()) return Corrupt(labels.status());
  const std::string& label_name = source.annotated ? source.where : source.label_file;
  if (labels->duplicates > 0) {
    o.warnings.push_back(DisplayText(absl::StrCat(
        "WARNING: ", label_name, ": ", labels->duplicates, " duplicate labels removed")));
  }
  if (labels->clipped > 0) {
    o.warnings.push_back(DisplayText(
        absl::StrCat("WARNING: ", label_name, source.annotated ? ": box " : ":",
                     labels->first_clipped_line, ": ", labels->clipped,
                     " box(es) reaching beyond the image clipped to it")));
  }
  o.counts.duplicates = labels->duplicates;
  o.counts.clipped = labels->clipped;
  o.usable = true;
  o.entry.path = source.image;
  o.entry.width = info->width;
  o.entry.height = info->height;
  o.entry.labels = std::move(labels->labels);
  return o;
}

void Add(const ScanCounts& c, ScanCounts* total) {
  total->found += c.found;
  total->missing += c.missing;
  total->empty += c.empty;
  total->corrupt += c.corrupt;
  total->duplicates += c.duplicates;
  total->clipped += c.clipped;
  total->repeated += c.repeated;
}

absl::Status InSplit(const std::string& name, const absl::Status& status) {
  return absl::Status(status.code(),
                      DisplayText(absl::StrCat(name, ": ", status.message())));
}

// Why no label file was found: the first image's labels folder.
std::string NoLabelsError(const std::string& name,
                          const std::vector<ImageSource>& sources, int64_t yolo_images) {
  const ImageSource* first = nullptr;
  for (const ImageSource& s : sources) {
    if (!s.annotated) {
      first = &s;
      break;
    }
  }
  const std::filesystem::path folder =
      std::filesystem::path(first->label_file).parent_path();
  std::error_code ec;
  const char* state = !std::filesystem::exists(folder, ec)    ? "does not exist"
                      : std::filesystem::is_empty(folder, ec) ? "is empty"
                                                              : "holds none of them";
  return absl::StrCat(name, ": no label file for any of ", yolo_images,
                      " images: expected ", first->label_file, " for ", first->image,
                      ", but ", folder.string(), " ", state,
                      " (YOLOv5's labels/ folder sits next to images/, one .txt per "
                      "image)");
}

}  // namespace

int64_t Split::num_labels() const {
  int64_t n = 0;
  for (const ImageEntry& image : images) n += static_cast<int64_t>(image.labels.size());
  return n;
}

absl::StatusOr<Split> ScanSplit(const std::string& name,
                                const std::vector<std::string>& sources, int num_classes,
                                const ScanOptions& options) {
  Split split;
  split.name = name;
  std::vector<ImageSource> listed;
  for (const std::string& source : sources) {
    absl::StatusOr<SourceList> list = ListSource(source, num_classes);
    if (!list.ok()) return InSplit(name, list.status());
    for (ImageSource& s : list->images) listed.push_back(std::move(s));
    for (std::string& w : list->warnings) split.warnings.push_back(DisplayText(w));
    split.counts.corrupt += list->corrupt;
  }
  std::stable_sort(
      listed.begin(), listed.end(),
      [](const ImageSource& a, const ImageSource& b) { return a.image < b.image; });
  std::vector<ImageSource> unique;
  for (ImageSource& s : listed) {
    if (!unique.empty() && unique.back().image == s.image) {
      if (split.counts.repeated++ == 0) {
        split.warnings.push_back(DisplayText(
            absl::StrCat("WARNING: ", s.image,
                         ": listed more than once, kept once (the first listing)")));
      }
      continue;
    }
    unique.push_back(std::move(s));
  }

  std::vector<Outcome> outcomes(unique.size());
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < unique.size();) {
      outcomes[i] = ScanOne(unique[i], num_classes, options.decode_images);
    }
  };
  int threads = options.threads > 0
                    ? options.threads
                    : std::min<int>(kMaxThreads, std::thread::hardware_concurrency());
  threads = std::clamp<int>(threads, 1, std::max<size_t>(unique.size(), 1));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();

  absl::Status fatal;
  int64_t fatal_images = 0, yolo_images = 0, yolo_found = 0;
  for (size_t i = 0; i < unique.size(); ++i) {
    Outcome& o = outcomes[i];
    if (!o.fatal.ok() && fatal_images++ == 0) fatal = o.fatal;
    if (!unique[i].annotated) {
      ++yolo_images;
      yolo_found += o.counts.found;
    }
    Add(o.counts, &split.counts);
    for (std::string& w : o.warnings) split.warnings.push_back(std::move(w));
    if (o.usable) split.images.push_back(std::move(o.entry));
  }
  if (!fatal.ok()) {
    return InSplit(
        name,
        absl::OutOfRangeError(absl::StrCat(
            fatal.message(), fatal_images > 1 ? " (and in " : "",
            fatal_images > 1 ? absl::StrCat(fatal_images - 1, " more images)") : "")));
  }
  if (split.images.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": no usable image: all ", split.counts.corrupt,
                     " were left out; the first: ",
                     split.warnings.empty() ? "" : split.warnings.front()));
  }
  if (yolo_images > 0 && yolo_found == 0) {
    return absl::NotFoundError(DisplayText(NoLabelsError(name, unique, yolo_images)));
  }
  return split;
}

absl::StatusOr<Dataset> LoadDataset(const std::string& yaml_path,
                                    const ScanOptions& options) {
  Dataset dataset;
  ASSIGN_OR_RETURN(dataset.yaml, ReadDataYaml(yaml_path));
  const int nc = static_cast<int>(dataset.yaml.names.size());
  ASSIGN_OR_RETURN(dataset.train, ScanSplit("train", dataset.yaml.train, nc, options));
  ASSIGN_OR_RETURN(dataset.val, ScanSplit("val", dataset.yaml.val, nc, options));
  return dataset;
}

std::string ScanSummary(const Split& split) {
  const ScanCounts& c = split.counts;
  std::string out =
      absl::StrCat(split.name, ": ", split.images.size(), " images, ", split.num_labels(),
                   " objects; ", c.found, " label files found, ", c.missing, " missing, ",
                   c.empty, " empty, ", c.corrupt, " corrupt (left out)");
  if (c.duplicates > 0)
    absl::StrAppend(&out, ", ", c.duplicates, " duplicate labels removed");
  if (c.clipped > 0)
    absl::StrAppend(&out, ", ", c.clipped, " boxes clipped to their image");
  if (c.repeated > 0)
    absl::StrAppend(&out, ", ", c.repeated, " images listed more than once");
  return out;
}

}  // namespace elastrun::trainer::detect
