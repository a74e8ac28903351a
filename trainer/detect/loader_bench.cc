// elastrun-detect-loader-bench: how many images per second the detector's
// loader (loader.h) produces alone, no model, no torch. Thin: parse flags,
// load the dataset index, run batches, print the rate.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <string>

#include "common/flags.h"
#include "trainer/detect/data.h"
#include "trainer/detect/loader.h"

namespace {

namespace detect = elastrun::trainer::detect;

constexpr char kBinary[] = "elastrun-detect-loader-bench";

constexpr char kIntro[] = R"(usage: elastrun-detect-loader-bench DATA_YAML [flags]

Loads batches of DATA_YAML's train split (or val) as training does and
prints the loader's images per second, decoding and augmentation included.
)";

int Fail(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", kBinary, what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string yaml, split_name = "train";
  detect::LoaderOptions o;
  o.image_size = 128;
  int batch = 32, batches = 50, cache_mb = 0;
  auto app = elastrun::flags::NewApp(kBinary, kIntro, "");
  app->add_option("data_yaml", yaml, "")->required()->type_name("DATA_YAML");
  app->add_option("--image-size", o.image_size, "S (default 128)")->type_name("PX");
  app->add_option("--batch", batch, "images per batch (default 32)")
      ->type_name("N")
      ->check(CLI::Range(1, 100000));
  app->add_option("--batches", batches, "batches to time (default 50)")
      ->type_name("N")
      ->check(CLI::Range(1, 1000000));
  app->add_option("--workers", o.num_workers, "decoding threads (default 0: none)")
      ->type_name("N");
  app->add_option("--prefetch", o.prefetch, "batches in flight (default 2)")
      ->type_name("N");
  app->add_flag("--augment", o.augment, "train augmentation (mosaic, hsv, flips, ...)");
  app->add_option("--mixup", o.hyp.mixup, "mixup probability (default 0)")
      ->type_name("P");
  app->add_option("--cache-mb", cache_mb,
                  "keep decoded images in memory, up to this many MB (default 0: none)")
      ->type_name("MB")
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("--split", split_name, "train or val (default train)")
      ->check(CLI::IsMember({"train", "val"}));
  if (auto exit_code = elastrun::flags::Parse(*app, argc, argv)) return *exit_code;
  o.cache_bytes = int64_t{cache_mb} << 20;
  if (absl::Status s = detect::CheckLoaderOptions(o); !s.ok()) {
    std::cerr << elastrun::flags::UsageError(kBinary, std::string(s.message()));
    return elastrun::flags::kExitUsage;
  }

  absl::StatusOr<detect::Dataset> dataset = detect::LoadDataset(yaml);
  if (!dataset.ok()) return Fail(std::string(dataset.status().message()));
  const detect::Split& split = split_name == "val" ? dataset->val : dataset->train;
  absl::StatusOr<std::unique_ptr<detect::Loader>> loader =
      detect::Loader::Create(split, o);
  if (!loader.ok()) return Fail(std::string(loader.status().message()));

  const int64_t n = static_cast<int64_t>(split.images.size());
  int64_t next_index = 0;
  const auto enqueue = [&](int64_t b) {
    std::vector<int64_t> indices(batch);
    for (int64_t& i : indices) i = next_index++ % n;
    (*loader)->Enqueue(b * batch / n, std::move(indices));
  };
  for (int b = 0; b < std::min(batches, o.prefetch + 1); ++b) enqueue(b);
  int enqueued = std::min(batches, o.prefetch + 1);
  const auto start = std::chrono::steady_clock::now();
  int64_t images = 0, objects = 0;
  for (int b = 0; b < batches; ++b) {
    absl::StatusOr<detect::LoadedBatch> got = (*loader)->Next();
    if (!got.ok()) return Fail(std::string(got.status().message()));
    images += got->size;
    objects += static_cast<int64_t>(got->targets.size() / 6);
    if (enqueued < batches) enqueue(enqueued++);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "%s: S=%d batch=%d workers=%d augment=%d cache=%d MB: %lld images (%lld objects) "
      "in %.2f s: %.0f images/s\n",
      split.name.c_str(), o.image_size, batch, o.num_workers, o.augment ? 1 : 0, cache_mb,
      static_cast<long long>(images), static_cast<long long>(objects), seconds,
      images / seconds);
  return 0;
}
