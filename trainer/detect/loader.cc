#include "trainer/detect/loader.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace elastrun::trainer::detect {

// One queued batch. `claimed` and `done` are guarded by the Loader's mu_;
// each sample's slots are written only by the thread that claimed it, and
// read by Next after `done` reaches the batch's size (under mu_).
struct Loader::Job {
  int64_t epoch = 0;
  std::vector<int64_t> indices;
  int64_t claimed = 0;
  int64_t done = 0;
  std::vector<uint8_t> pixels;  // [size, 3, S, S]
  std::vector<std::vector<Label>> labels;
  std::vector<Placement> placements;
  std::vector<absl::Status> statuses;

  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

struct Loader::Sample {
  Image image;  // S x S, HWC
  std::vector<Label> labels;
  Placement placement;
};

absl::Status CheckLoaderOptions(const LoaderOptions& options) {
  if (options.image_size < 32 || options.image_size > 8192) {
    return absl::InvalidArgumentError(absl::StrCat("image_size is ", options.image_size,
                                                   ": it must be in [32, 8192] pixels"));
  }
  if (options.num_workers < 0 || options.num_workers > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers is ", options.num_workers,
                     ": it must be in [0, 256] (0: no threads)"));
  }
  if (options.cache_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cache_bytes is ", options.cache_bytes,
                                                   ": it must be >= 0 (0: no cache)"));
  }
  if (options.prefetch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefetch is ", options.prefetch, ": it must be at least 1 batch"));
  }
  return CheckAugmentOptions(options.hyp);
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(const Split& split,
                                                       const LoaderOptions& options) {
  RETURN_IF_ERROR(CheckLoaderOptions(options));
  if (split.images.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("split '", split.name, "' has no images to load"));
  }
  return std::unique_ptr<Loader>(new Loader(split, options));
}

Loader::Loader(const Split& split, const LoaderOptions& options)
    : split_(split), options_(options) {
  if (options_.cache_bytes > 0) {
    absl::MutexLock lock(&cache_mu_);
    cache_.resize(split_.images.size());
  }
  for (int i = 0; i < options_.num_workers; ++i)
    workers_.emplace_back([this] { WorkerLoop(); });
}

Loader::~Loader() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

Loader::Job Loader::NewJob(int64_t epoch, std::vector<int64_t> indices) {
  Job job;
  job.epoch = epoch;
  job.indices = std::move(indices);
  const size_t n = job.indices.size();
  job.labels.resize(n);
  job.placements.resize(n);
  job.statuses.resize(n);
  return job;
}

void Loader::AllocatePixels(Job* job) const {
  job->pixels.resize(job->indices.size() * options_.image_size * options_.image_size * 3);
}

void Loader::Enqueue(int64_t epoch, std::vector<int64_t> indices) {
  // Pixels are allocated when loading starts: a whole epoch may be queued.
  auto job = std::make_shared<Job>(NewJob(epoch, std::move(indices)));
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(job));
}

void Loader::Clear() {
  absl::MutexLock lock(&mu_);
  queue_.clear();
}

int64_t Loader::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

absl::StatusOr<LoadedBatch> Loader::Next() {
  std::shared_ptr<Job> job;
  {
    absl::MutexLock lock(&mu_);
    if (queue_.empty()) {
      return absl::FailedPreconditionError(
          "Loader::Next: no batch queued (call Enqueue first)");
    }
    job = queue_.front();
    if (!workers_.empty()) {
      const auto done = [&job] { return job->done == job->size(); };
      mu_.Await(absl::Condition(&done));
    }
    queue_.pop_front();
  }
  if (workers_.empty()) {
    AllocatePixels(job.get());
    for (int64_t i = 0; i < job->size(); ++i) Fill(job.get(), i);
  }
  return Assemble(job.get(), options_.image_size);
}

absl::StatusOr<LoadedBatch> Loader::LoadOne(int64_t epoch, int64_t index) const {
  Job job = NewJob(epoch, {index});
  AllocatePixels(&job);
  Fill(&job, 0);
  return Assemble(&job, options_.image_size);
}

std::shared_ptr<Loader::Job> Loader::Claimable() const {
  const size_t window = std::min(queue_.size(), static_cast<size_t>(options_.prefetch));
  for (size_t b = 0; b < window; ++b) {
    if (queue_[b]->claimed < queue_[b]->size()) return queue_[b];
  }
  return nullptr;
}

void Loader::WorkerLoop() {
  for (;;) {
    std::shared_ptr<Job> job;
    int64_t i = 0;
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || Claimable() != nullptr;
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      job = Claimable();
      // The first claim sizes the pixels, before any sample is written.
      if (job->claimed == 0) AllocatePixels(job.get());
      i = job->claimed++;
    }
    Fill(job.get(), i);
    absl::MutexLock lock(&mu_);
    ++job->done;
  }
}

void Loader::Fill(Job* job, int64_t i) const {
  absl::StatusOr<Sample> sample = LoadSample(job->epoch, job->indices[i]);
  if (!sample.ok()) {
    job->statuses[i] = sample.status();
    return;
  }
  // HWC -> CHW.
  const size_t plane = static_cast<size_t>(options_.image_size) * options_.image_size;
  uint8_t* out = &job->pixels[i * plane * 3];
  const uint8_t* in = sample->image.pixels.data();
  for (size_t p = 0; p < plane; ++p) {
    out[p] = in[p * 3];
    out[plane + p] = in[p * 3 + 1];
    out[2 * plane + p] = in[p * 3 + 2];
  }
  job->labels[i] = std::move(sample->labels);
  job->placements[i] = sample->placement;
}

absl::StatusOr<LoadedBatch> Loader::Assemble(Job* job, int image_size) {
  for (const absl::Status& s : job->statuses) RETURN_IF_ERROR(s);
  LoadedBatch batch;
  batch.size = job->size();
  batch.image_size = image_size;
  batch.indices = std::move(job->indices);
  batch.pixels = std::move(job->pixels);
  batch.placements = std::move(job->placements);
  for (int64_t i = 0; i < batch.size; ++i) {
    for (const Label& l : job->labels[i]) {
      batch.targets.insert(
          batch.targets.end(),
          {static_cast<float>(i), static_cast<float>(l.cls), l.cx, l.cy, l.w, l.h});
    }
  }
  return batch;
}

absl::StatusOr<Image> Loader::LoadResized(int64_t index, float* gain) const {
  const ImageEntry& entry = split_.images[index];
  const int s = options_.image_size;
  if (options_.cache_bytes > 0) {
    const Cached* cached = nullptr;
    {
      absl::MutexLock lock(&cache_mu_);
      cached = cache_[index].get();
    }
    if (cached != nullptr) {
      *gain = cached->gain;
      return cached->image;
    }
  }
  absl::StatusOr<Image> image = ReadImage(entry.path);
  if (!image.ok()) {
    return absl::Status(
        image.status().code(),
        absl::StrCat(split_.name, " image ", index, ": ", image.status().message()));
  }
  // YOLOv5's load_image: INTER_LINEAR when augmenting or enlarging,
  // INTER_AREA when shrinking for eval.
  Image resized = ResizeLongSide(
      *std::move(image), s,
      options_.augment ? Interpolation::kBilinear : Interpolation::kArea, gain);
  if (options_.cache_bytes > 0) {
    const int64_t bytes = static_cast<int64_t>(resized.pixels.size());
    absl::MutexLock lock(&cache_mu_);
    if (cache_[index] == nullptr && cache_used_ + bytes <= options_.cache_bytes) {
      cache_[index] = std::make_unique<const Cached>(Cached{resized, *gain});
      cache_used_ += bytes;
    }
  }
  return resized;
}

absl::StatusOr<Image> Loader::LoadMosaic(int64_t index, SampleRng* rng,
                                         std::vector<PixelBox>* boxes) const {
  const int s = options_.image_size;
  const int xc = static_cast<int>(rng->Uniform(s / 2, 2 * s - s / 2));
  const int yc = static_cast<int>(rng->Uniform(s / 2, 2 * s - s / 2));
  int64_t picks[4] = {index, 0, 0, 0};
  const int64_t n = static_cast<int64_t>(split_.images.size());
  for (int k = 1; k < 4; ++k) picks[k] = rng->Below(n);
  for (int k = 3; k > 0; --k) std::swap(picks[k], picks[rng->Below(k + 1)]);  // shuffle
  Image images[4];
  std::array<MosaicTile, 4> tiles;
  for (int k = 0; k < 4; ++k) {
    float gain = 1;
    ASSIGN_OR_RETURN(images[k], LoadResized(picks[k], &gain));
    const ImageEntry& entry = split_.images[picks[k]];
    tiles[k].image = &images[k];
    tiles[k].boxes =
        ToPixelBoxes(entry.labels, entry.width * gain, entry.height * gain, 0, 0);
  }
  boxes->clear();
  const Image canvas = MosaicCanvas(tiles, s, xc, yc, boxes);
  return RandomPerspective(canvas, -s / 2, options_.hyp, rng, boxes);
}

absl::StatusOr<Loader::Sample> Loader::LoadSample(int64_t epoch, int64_t index) const {
  const int64_t n = static_cast<int64_t>(split_.images.size());
  if (index < 0 || index >= n) {
    return absl::OutOfRangeError(
        absl::StrCat(split_.name, " has ", n, " images: no index ", index));
  }
  const int s = options_.image_size;
  const AugmentOptions& hyp = options_.hyp;
  const ImageEntry& entry = split_.images[index];
  SampleRng rng(options_.seed, epoch, index);
  Sample sample;
  sample.placement.width = entry.width;
  sample.placement.height = entry.height;
  std::vector<PixelBox> boxes;
  if (options_.augment && rng.Uniform() < hyp.mosaic) {
    ASSIGN_OR_RETURN(sample.image, LoadMosaic(index, &rng, &boxes));
    if (rng.Uniform() < hyp.mixup) {
      std::vector<PixelBox> other_boxes;
      ASSIGN_OR_RETURN(const Image other, LoadMosaic(rng.Below(n), &rng, &other_boxes));
      Mixup(&sample.image, other, rng.Beta(32, 32));
      boxes.insert(boxes.end(), other_boxes.begin(), other_boxes.end());
    }
  } else {
    Placement placement;
    ASSIGN_OR_RETURN(const Image resized, LoadResized(index, &placement.gain));
    sample.image = Letterbox(resized, s, &placement);
    boxes = ToPixelBoxes(entry.labels, entry.width * placement.gain,
                         entry.height * placement.gain, placement.pad_x, placement.pad_y);
    if (options_.augment) {
      sample.image = RandomPerspective(sample.image, 0, hyp, &rng, &boxes);
    } else {
      sample.placement.gain = placement.gain;
      sample.placement.pad_x = placement.pad_x;
      sample.placement.pad_y = placement.pad_y;
    }
  }
  sample.labels = ToLabels(boxes, s, s);
  if (options_.augment) {
    AugmentHsv(&sample.image, hyp, &rng);
    if (rng.Uniform() < hyp.flipud) {
      FlipUpDown(&sample.image);
      for (Label& l : sample.labels) l.cy = 1 - l.cy;
    }
    if (rng.Uniform() < hyp.fliplr) {
      FlipLeftRight(&sample.image);
      for (Label& l : sample.labels) l.cx = 1 - l.cx;
    }
  }
  return sample;
}

}  // namespace elastrun::trainer::detect
