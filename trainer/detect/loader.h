// The detector's batch loader, torch-free: YOLOv5's LoadImagesAndLabels
// (__getitem__, load_image, load_mosaic) and its collate over a Split
// (data.h), images decoded and augmented (augment.h) in worker threads,
// batches handed out in the order they were queued as uint8 CHW pixels and
// YOLOv5's [n, 6] targets.
//
// Determinism: every random draw for sample `index` of `epoch` comes from
// SampleRng(seed, epoch, index), so a batch's bytes depend only on the
// options, the split, the epoch and its indices: not on num_workers,
// prefetch, or the batches loaded before it (an exact resume).
//
// Thread-safety: Enqueue, Next and Clear are for one consumer thread;
// LoadOne may be called from any thread at any time.
#ifndef ELASTRUN_TRAINER_DETECT_LOADER_H_
#define ELASTRUN_TRAINER_DETECT_LOADER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "trainer/detect/augment.h"
#include "trainer/detect/data.h"

namespace elastrun::trainer::detect {

struct LoaderOptions {
  int image_size = 640;  // the square training/eval size S; at least 32
  bool augment = false;  // train: mosaic, perspective, hsv, flips; val: letterbox only
  AugmentOptions hyp;    // used when augment
  int num_workers = 0;   // decoding threads; 0: load in Next, on the calling thread
  int prefetch = 2;      // batches the workers load ahead of Next; at least 1
  uint64_t seed = 0;     // with (epoch, index): every random draw of a sample
  // YOLOv5's --cache ram: images kept in memory as load_image leaves them
  // (decoded, longer side S: at most 3 S^2 bytes each) after their first
  // load, until this many bytes are held; 0: decode every time. The bytes
  // of a batch are the same either way.
  int64_t cache_bytes = 0;
};

// InvalidArgument naming the key ("image_size", "hyp.mixup", ...) and the
// range it must be in.
absl::Status CheckLoaderOptions(const LoaderOptions& options);

struct LoadedBatch {
  int64_t size = 0;
  int image_size = 0;
  // Dataset indices, in batch order.
  std::vector<int64_t> indices;
  // [size, 3, S, S]: RGB, channel-major (CHW) per image.
  std::vector<uint8_t> pixels;
  // [n, 6] rows: image index in the batch, class, cx, cy, w, h
  // (normalised to S), images in batch order, each image's objects in order.
  std::vector<float> targets;
  // Per image: where the original sits in the S x S input. Exact for
  // augment=false (letterbox); for augmented samples only width and height
  // (the original's) are set.
  std::vector<Placement> placements;
};

class Loader {
 public:
  // A loader over `split` (copied). Errors: CheckLoaderOptions';
  // FailedPrecondition for a split without images.
  static absl::StatusOr<std::unique_ptr<Loader>> Create(const Split& split,
                                                        const LoaderOptions& options);
  // Stops the workers (the sample each is on is finished first).
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Queues the batch of `indices` (dataset indices, any length >= 1,
  // repeats allowed) of `epoch`; the workers start on it once fewer than
  // `prefetch` batches are ahead of it. An index out of range is reported
  // by Next, as its batch's error.
  void Enqueue(int64_t epoch, std::vector<int64_t> indices);

  // The oldest queued batch, waiting for it. Errors: FailedPrecondition
  // when none is queued; for a sample that fails (the first in batch
  // order), its error naming the split, the index and the file (an image
  // that does not decode: DataLoss "...: corrupt JPEG: ..."); OutOfRange
  // for an index beyond the split. The batch is consumed either way.
  absl::StatusOr<LoadedBatch> Next();

  // Sample `index` of `epoch` alone, as a batch of one: the same bytes as
  // its slice of any batch holding it. Errors as Next's.
  absl::StatusOr<LoadedBatch> LoadOne(int64_t epoch, int64_t index) const;

  // Drops every queued batch (a resume, an epoch change); samples being
  // loaded are finished and thrown away.
  void Clear();

  // Batches queued and not yet taken by Next.
  int64_t queued() const;

 private:
  struct Job;
  struct Sample;

  Loader(const Split& split, const LoaderOptions& options);
  // A sample: decode, augment (or letterbox), labels normalised to S.
  absl::StatusOr<Sample> LoadSample(int64_t epoch, int64_t index) const;
  // YOLOv5's load_image: decoded, longer side S; `gain` its scale. From
  // the cache when there.
  absl::StatusOr<Image> LoadResized(int64_t index, float* gain) const;
  // YOLOv5's load_mosaic of `index` and 3 others drawn from `rng`.
  absl::StatusOr<Image> LoadMosaic(int64_t index, SampleRng* rng,
                                   std::vector<PixelBox>* boxes) const;
  static Job NewJob(int64_t epoch, std::vector<int64_t> indices);
  // Sizes job->pixels for its batch.
  void AllocatePixels(Job* job) const;
  // Loads sample i of `job` into its slots (pixels allocated).
  void Fill(Job* job, int64_t i) const;
  static absl::StatusOr<LoadedBatch> Assemble(Job* job, int image_size);
  void WorkerLoop();
  // The first claimable sample's job within the prefetch window, or null.
  std::shared_ptr<Job> Claimable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Split split_;
  const LoaderOptions options_;

  // load_image's results by index (null: not cached). A slot is written
  // once and its image never changes or goes away until the Loader does.
  mutable absl::Mutex cache_mu_;
  struct Cached {
    Image image;
    float gain = 1;
  };
  mutable std::vector<std::unique_ptr<const Cached>> cache_ ABSL_GUARDED_BY(cache_mu_);
  mutable int64_t cache_used_ ABSL_GUARDED_BY(cache_mu_) = 0;

  mutable absl::Mutex mu_;
  // A job is shared by the queue and the workers filling its samples: Clear
  // drops it from the queue while a worker may still be writing into it.
  std::deque<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_LOADER_H_
