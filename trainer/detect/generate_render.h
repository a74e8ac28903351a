// Drawing one image of the generated detection dataset (generate.h), pure
// and torch-free: Fashion-MNIST items (28x28 grey) scaled, stretched and
// tinted onto a noisy colour-gradient canvas, each with the tight box of
// its visible pixels.
//
// Everything is integer arithmetic on a counter-based random stream, so an
// image is a function of (seed, split, index) alone: the same on any
// machine, compiler and thread, whatever else is drawn.
#ifndef ELASTRUN_TRAINER_DETECT_GENERATE_RENDER_H_
#define ELASTRUN_TRAINER_DETECT_GENERATE_RENDER_H_

#include <cstdint>
#include <vector>

#include "trainer/detect/data_labels.h"
#include "trainer/detect/image.h"

namespace elastrun::trainer::detect {

// Fashion-MNIST's ten classes, in label order.
inline constexpr const char* kFashionMnistNames[] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

// SplitMix64 over a key: the n-th number of the stream for one image.
class Rng {
 public:
  // A stream for (seed, split, index): independent streams for any two keys.
  Rng(uint64_t seed, uint64_t split, uint64_t index);
  uint64_t Next();
  // Uniform in [0, n); n >= 1.
  uint32_t Below(uint32_t n);
  // Uniform in [lo, hi] (inclusive); lo <= hi.
  int Between(int lo, int hi);

 private:
  uint64_t state_;
};

// A source of items: `count` grey images of rows x cols bytes (IDX order)
// and their classes. Not owned.
struct ItemSet {
  const uint8_t* pixels = nullptr;
  const uint8_t* classes = nullptr;
  int64_t count = 0;
  int rows = 28;
  int cols = 28;
};

// An item's coverage scaled to width x height (alpha 0-255, row-major),
// and the inclusive box of its nonzero alpha; empty() when none is.
struct ItemMask {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> alpha;
  int x0 = 0, y0 = 0, x1 = -1, y1 = -1;
  bool empty() const { return x1 < x0; }
};

// Pixels of an item at or below this are background (Fashion-MNIST's
// surround is 0 with stray 1s and 2s).
inline constexpr int kInkThreshold = 16;

// The item's inked part (its pixels above kInkThreshold, cropped to their
// extent) scaled bilinearly to width x height (both >= 1), its brightest
// pixel opaque. An item with no ink gives an empty mask.
ItemMask ScaleItem(const uint8_t* item, int rows, int cols, int width, int height);

// Blends `colour` over `canvas` with the mask's alpha, its top-left corner
// at (x, y); the mask must lie inside the canvas.
void DrawItem(const ItemMask& mask, int x, int y, const uint8_t colour[3], Image* canvas);

// How one image is drawn.
struct RenderOptions {
  int image_size = 256;  // square canvas, pixels
  int min_objects = 1;   // objects per image, before placements fail
  int max_objects = 6;
  int min_object_size = 24;  // the longer side of an object, pixels
  int max_object_size = 96;
  // An object may hide at most this share of an earlier one's box (and the
  // other way round); a placement hiding more is tried again elsewhere.
  double max_cover = 0.5;
};

struct RenderedImage {
  Image image;
  std::vector<Label> labels;
};

// Image `index` of `split` (0 train, 1 val) for `seed`: the background,
// then objects placed one by one (each tried up to 20 times before it is
// left out). Labels are the tight boxes of the objects' visible pixels,
// normalised, in drawing order.
RenderedImage RenderImage(const ItemSet& items, const RenderOptions& options,
                          uint64_t seed, int split, int64_t index);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_GENERATE_RENDER_H_
