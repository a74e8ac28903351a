#include "trainer/detect/generate.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "trainer/idx.h"

namespace elastrun::trainer::detect {
namespace {

namespace fs = std::filesystem;

constexpr int kNumClasses = 10;
constexpr const char* kSplits[] = {"train", "val"};

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// What the workers share, and how far they got.
struct Work {
  const GenerateOptions* options;
  const ItemSet* items[2];
  fs::path out;
  int64_t total = 0;
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};

  absl::Mutex mu;
  int64_t done ABSL_GUARDED_BY(mu) = 0;
  int64_t tenths_reported ABSL_GUARDED_BY(mu) = 0;
  int running ABSL_GUARDED_BY(mu) = 0;  // workers
  absl::Status error ABSL_GUARDED_BY(mu);
  std::vector<int64_t> objects[2] ABSL_GUARDED_BY(mu);  // per class, per split
  int64_t bytes ABSL_GUARDED_BY(mu) = 0;

  // A tenth more is done, or every worker has stopped.
  bool ProgressDue() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return running == 0 || done * 10 / total > tenths_reported;
  }
};

std::string LabelText(const std::vector<Label>& labels) {
  std::string text;
  for (const Label& l : labels) {
    absl::StrAppendFormat(&text, "%d %.6f %.6f %.6f %.6f\n", l.cls, l.cx, l.cy, l.w, l.h);
  }
  return text;
}

// Draws and writes image `job` of the whole run; its byte count.
absl::StatusOr<int64_t> WriteOne(Work& work, int64_t job,
                                 std::vector<int64_t> objects[2]) {
  const GenerateOptions& o = *work.options;
  const int split = job < o.train_images ? 0 : 1;
  const int64_t index = split == 0 ? job : job - o.train_images;
  const RenderedImage rendered =
      RenderImage(*work.items[split], o.render, o.seed, split, index);
  ASSIGN_OR_RETURN(const std::string bytes,
                   EncodeImage(rendered.image, o.format, o.jpeg_quality));
  const std::string stem = absl::StrFormat("%06d", index);
  const char* extension = o.format == ImageFormat::kPng ? ".png" : ".jpg";
  RETURN_IF_ERROR(WriteFileBytes(
      (work.out / "images" / kSplits[split] / (stem + extension)).string(), bytes));
  const std::string text = LabelText(rendered.labels);
  RETURN_IF_ERROR(WriteFileBytes(
      (work.out / "labels" / kSplits[split] / (stem + ".txt")).string(), text));
  for (const Label& l : rendered.labels) ++objects[split][l.cls];
  return static_cast<int64_t>(bytes.size() + text.size());
}

void Worker(Work& work) {
  std::vector<int64_t> objects[2] = {std::vector<int64_t>(kNumClasses),
                                     std::vector<int64_t>(kNumClasses)};
  int64_t bytes = 0;
  for (int64_t job; !work.failed.load() && (job = work.next.fetch_add(1)) < work.total;) {
    absl::StatusOr<int64_t> written = WriteOne(work, job, objects);
    absl::MutexLock lock(&work.mu);
    if (!written.ok()) {
      if (work.error.ok()) work.error = written.status();
      work.failed = true;
      break;
    }
    bytes += *written;
    ++work.done;
  }
  absl::MutexLock lock(&work.mu);
  for (int s = 0; s < 2; ++s) {
    for (int c = 0; c < kNumClasses; ++c) work.objects[s][c] += objects[s][c];
  }
  work.bytes += bytes;
  --work.running;
}

// Runs `threads` workers to the end, reporting every tenth of the work
// from this thread (the callback never runs under the lock).
void RunWorkers(Work& work, int threads) {
  {
    absl::MutexLock lock(&work.mu);
    work.running = threads;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&work] { Worker(work); });
  for (bool finished = false; !finished;) {
    std::string line;
    {
      absl::MutexLock lock(&work.mu);
      work.mu.Await(absl::Condition(&work, &Work::ProgressDue));
      finished = work.running == 0;
      if (work.done * 10 / work.total > work.tenths_reported) {
        work.tenths_reported = work.done * 10 / work.total;
        line = absl::StrCat("wrote ", work.done, "/", work.total, " images");
      }
    }
    if (!line.empty() && work.options->progress) work.options->progress(line);
  }
  for (std::thread& t : pool) t.join();
}

std::string DataYamlText(const GenerateOptions& o, const fs::path& out) {
  std::string text = absl::StrFormat(
      "# Fashion-MNIST detection: %d train + %d val %dx%d %s images, seed %d,\n"
      "# %d-%d objects of %d-%d px each; made by elastrun-detect-data.\n",
      o.train_images, o.val_images, o.render.image_size, o.render.image_size,
      FormatName(o.format), o.seed, o.render.min_objects, o.render.max_objects,
      o.render.min_object_size, o.render.max_object_size);
  absl::StrAppend(&text, "path: '", absl::StrReplaceAll(out.string(), {{"'", "''"}}),
                  "'\n", "train: images/train\nval: images/val\n", "nc: ", kNumClasses,
                  "\n", "names:\n");
  for (int c = 0; c < kNumClasses; ++c) {
    absl::StrAppend(&text, "  ", c, ": '", kFashionMnistNames[c], "'\n");
  }
  return text;
}

}  // namespace

absl::Status CheckGenerateOptions(const GenerateOptions& o) {
  const RenderOptions& r = o.render;
  if (r.image_size < 32 || r.image_size > 8192) {
    return Invalid(absl::StrCat("--size: ", r.image_size, " is not in 32-8192 pixels"));
  }
  if (o.train_images < 0 || o.val_images < 0 || o.train_images + o.val_images == 0) {
    return Invalid(absl::StrCat("--train ", o.train_images, ", --val ", o.val_images,
                                ": both at least 0, and not both 0"));
  }
  if (r.min_objects < 0 || r.max_objects < r.min_objects || r.max_objects > 100) {
    return Invalid(absl::StrCat("--objects ", r.min_objects, ":", r.max_objects,
                                ": needs 0 <= MIN <= MAX <= 100"));
  }
  if (r.min_object_size < 4 || r.max_object_size < r.min_object_size ||
      r.min_object_size > r.image_size) {
    return Invalid(
        absl::StrCat("--object-size ", r.min_object_size, ":", r.max_object_size,
                     ": needs 4 <= MIN <= MAX and MIN <= --size (", r.image_size, ")"));
  }
  if (!(r.max_cover >= 0 && r.max_cover <= 1)) {
    return Invalid(absl::StrCat("max_cover ", r.max_cover, " is not in 0-1"));
  }
  if (o.format != ImageFormat::kJpeg && o.format != ImageFormat::kPng) {
    return Invalid(
        absl::StrCat("--format: ", FormatName(o.format), " is not jpg or png"));
  }
  if (o.jpeg_quality < 1 || o.jpeg_quality > 100) {
    return Invalid(absl::StrCat("--quality: ", o.jpeg_quality, " is not in 1-100"));
  }
  return absl::OkStatus();
}

absl::StatusOr<GenerateSummary> GenerateDataset(const GenerateOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(CheckGenerateOptions(options));
  std::error_code ec;
  const fs::path out = fs::absolute(options.out_dir, ec).lexically_normal();
  std::vector<std::string> existing;
  for (const char* name : {"images", "labels", "data.yaml"}) {
    if (fs::exists(out / name, ec)) existing.push_back(name);
  }
  if (!existing.empty() && !options.overwrite) {
    return absl::FailedPreconditionError(
        absl::StrCat(out.string(), " already holds ", absl::StrJoin(existing, ", "),
                     ": choose another folder, or pass --overwrite to replace them"));
  }
  for (const std::string& name : existing) {
    fs::remove_all(out / name, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat((out / name).string(), ": cannot remove: ", ec.message()));
    }
  }
  for (const char* kind : {"images", "labels"}) {
    for (const char* split : kSplits)
      RETURN_IF_ERROR(MakeDirs((out / kind / split).string()));
  }

  trainer::IdxDataset sources[2];
  ItemSet items[2];
  for (int s = 0; s < 2; ++s) {
    if ((s == 0 ? options.train_images : options.val_images) == 0) continue;
    ASSIGN_OR_RETURN(sources[s], trainer::ReadFashionMnist(options.fashion_mnist_root,
                                                           s == 0, kNumClasses));
    items[s].pixels = sources[s].images.data.data();
    items[s].classes = sources[s].labels.data.data();
    items[s].count = sources[s].size();
    items[s].rows = static_cast<int>(sources[s].images.dims[1]);
    items[s].cols = static_cast<int>(sources[s].images.dims[2]);
  }

  Work work;
  work.options = &options;
  work.items[0] = &items[0];
  work.items[1] = &items[1];
  work.out = out;
  work.total = options.train_images + options.val_images;
  {
    absl::MutexLock lock(&work.mu);
    work.objects[0].assign(kNumClasses, 0);
    work.objects[1].assign(kNumClasses, 0);
  }
  int threads = options.threads > 0
                    ? options.threads
                    : static_cast<int>(std::thread::hardware_concurrency());
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, work.total));
  RunWorkers(work, threads);

  GenerateSummary summary;
  {
    absl::MutexLock lock(&work.mu);
    RETURN_IF_ERROR(work.error);
    summary.objects_per_class.assign(kNumClasses, 0);
    for (int c = 0; c < kNumClasses; ++c) {
      summary.train_objects += work.objects[0][c];
      summary.val_objects += work.objects[1][c];
      summary.objects_per_class[c] = work.objects[0][c] + work.objects[1][c];
    }
    summary.bytes = work.bytes;
  }
  summary.yaml_path = (out / "data.yaml").string();
  RETURN_IF_ERROR(WriteFileBytes(summary.yaml_path, DataYamlText(options, out)));
  summary.train_images = options.train_images;
  summary.val_images = options.val_images;
  summary.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace elastrun::trainer::detect
