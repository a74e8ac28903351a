// YOLOv5's training augmentations (utils/augmentations.py, the image half
// of utils/dataloaders.py), torch-free, on 8-bit RGB images (image.h):
// resizing, letterbox, the 4-image mosaic, random_perspective with
// box_candidates, mixup, augment_hsv and the flips. trainer/detect/README.md
// ("Loading and augmentation") says where it differs from YOLOv5.
//
// Boxes here are data_labels.h's PixelBox: corners (x1, y1, x2, y2) on
// resample.h's plane, where pixel (i, j) covers [i, i+1) x [j, j+1), so
// the pixels and the boxes move together.
//
// Randomness: every function that draws takes a SampleRng, which the loader
// seeds from (seed, epoch, index) alone. Functions only; thread-safe.
#ifndef ELASTRUN_TRAINER_DETECT_AUGMENT_H_
#define ELASTRUN_TRAINER_DETECT_AUGMENT_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "trainer/detect/data_labels.h"
#include "trainer/detect/image.h"
#include "trainer/detect/resample.h"

namespace elastrun::trainer::detect {

// YOLOv5's hyperparameters of augmentation, by their names in
// hyp.scratch-low.yaml, with its values.
struct AugmentOptions {
  double hsv_h = 0.015;    // hue gain: H scaled by U(1 - hsv_h, 1 + hsv_h)
  double hsv_s = 0.7;      // saturation gain
  double hsv_v = 0.4;      // value gain
  double degrees = 0;      // rotation, U(-degrees, degrees)
  double translate = 0.1;  // translation, U(0.5 +- translate) of the output size
  double scale = 0.5;      // scale, U(1 - scale, 1 + scale); below 1
  double shear = 0;        // shear, U(-shear, shear) degrees, x and y
  double perspective = 0;  // perspective, U(-p, p); at most 0.001 (YOLOv5's bound)
  double flipud = 0;       // probability of an up-down flip
  double fliplr = 0.5;     // probability of a left-right flip
  double mosaic = 1.0;     // probability of a 4-image mosaic
  double mixup = 0;        // probability of mixing a mosaic with a second one
};

// InvalidArgument naming the key ("hyp.fliplr") and its range for a value
// out of it: NaN, negative, a probability or gain above 1, scale above
// 0.99, degrees above 360, shear above 89, perspective above 0.001.
absl::Status CheckAugmentOptions(const AugmentOptions& hyp);

// A deterministic generator for one sample: xoshiro256** seeded through
// splitmix64 from (seed, epoch, index), with its own uniform and Beta
// draws, so a sample's draws depend on nothing else (no shared state, no
// std::*_distribution whose output differs between standard libraries).
class SampleRng {
 public:
  SampleRng(uint64_t seed, int64_t epoch, int64_t index);
  uint64_t Next();
  // U[0, 1), 53 bits.
  double Uniform();
  // U[lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform over 0 .. n-1; n > 0.
  int64_t Below(int64_t n);
  // Beta(a, b) as Gamma(a) / (Gamma(a) + Gamma(b)); a, b >= 1.
  double Beta(double a, double b);

 private:
  double Normal();
  double Gamma(double a);
  std::array<uint64_t, 4> s_;
};

// How an image was placed in an S x S input: input = original * gain + pad,
// for pixels (on the plane above) and boxes alike. `width`, `height`: the
// original image's size.
struct Placement {
  float gain = 1, pad_x = 0, pad_y = 0;
  int width = 0, height = 0;
};

// YOLOv5's letterbox (auto=False) of an image whose longer side is `size`
// already: centred on a size x size canvas of 114, top = round(dh - 0.1)
// as YOLOv5. Adds its padding to `placement` (pad_x, pad_y).
Image Letterbox(const Image& src, int size, Placement* placement);

// YOLOv5's labels (normalised cx, cy, w, h) as PixelBoxes on an image of
// `width` x `height` placed at (pad_x, pad_y).
std::vector<PixelBox> ToPixelBoxes(const std::vector<Label>& labels, double width,
                                   double height, double pad_x, double pad_y);

// YOLOv5's xyxy2xywhn(clip=True, eps=1e-3): boxes on a width x height image
// clipped to [0, width - 1e-3] x [0, height - 1e-3], then normalised.
std::vector<Label> ToLabels(const std::vector<PixelBox>& boxes, int width, int height);

// One image of a mosaic: loaded with its longer side S (ResizeLongSide) and
// its boxes in its own pixels.
struct MosaicTile {
  const Image* image = nullptr;
  std::vector<PixelBox> boxes;
};

// YOLOv5's load_mosaic canvas: a 2S x 2S canvas of 114 with tiles[0..3]
// meeting at (xc, yc) (top-left, top-right, bottom-left, bottom-right), each
// cropped to the canvas; their boxes moved along and clipped to [0, 2S].
// Boxes of a tile's cropped-off part stay (clipped); random_perspective's
// box_candidates drops the slivers.
Image MosaicCanvas(const std::array<MosaicTile, 4>& tiles, int size, int xc, int yc,
                   std::vector<PixelBox>* boxes);

// YOLOv5's random_perspective: M = T S R P C drawn from `hyp` (degrees,
// translate, scale, shear, perspective), the image warped (bilinear, border
// 114) to (width + 2 border) x (height + 2 border). Each box's 4 corners
// are mapped, the quadrilateral clipped to the output (YOLOv5 clips the
// corners' extent instead, which overstates a rotated box cut by the
// frame), and its extent kept where BoxCandidate passes. `border` is -S/2
// for a mosaic, 0 otherwise.
Image RandomPerspective(const Image& src, int border, const AugmentOptions& hyp,
                        SampleRng* rng, std::vector<PixelBox>* boxes);

// random_perspective's transform: M (3 x 3, row-major, src -> output) and
// the scale s drawn for it.
struct Perspective {
  std::array<double, 9> m{};
  double scale = 1;
};

// M for a src_width x src_height image and an out_width x out_height
// output, drawn from `rng` in YOLOv5's order: perspective x, y, angle,
// scale, shear x, y, translate x, y.
Perspective DrawPerspective(int src_width, int src_height, int out_width, int out_height,
                            const AugmentOptions& hyp, SampleRng* rng);

// YOLOv5's box_candidates (wh_thr 2, ar_thr 100, area_thr 0.1, eps 1e-16):
// the box after a transform is kept when both sides exceed 2 px, its aspect
// ratio is below 100 and its area above 0.1 of the box before (scaled by
// `scale`).
bool BoxCandidate(const PixelBox& before, const PixelBox& after, double scale);

// YOLOv5's mixup of the pixels: im = uint8(im * r + other * (1 - r)),
// truncated as numpy's astype; the caller joins the boxes. Same sizes.
void Mixup(Image* im, const Image& other, double r);

// YOLOv5's augment_hsv with gains already drawn (1 + U(-1, 1) * hsv_*):
// OpenCV's 8-bit RGB -> HSV (H in [0, 180)), H = (H * gh) mod 180,
// S, V = clip(x * g, 0, 255) through 256-entry tables, HSV -> RGB.
void ApplyHsvGains(Image* im, double gain_h, double gain_s, double gain_v);

// Draws the gains from `rng` and applies them; no change (and no draw)
// when all three of hsv_h, hsv_s, hsv_v are 0, as YOLOv5.
void AugmentHsv(Image* im, const AugmentOptions& hyp, SampleRng* rng);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_AUGMENT_H_
