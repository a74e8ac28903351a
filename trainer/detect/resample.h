// Resampling 8-bit RGB images (image.h) for the detector's loader: resize
// (bilinear, area), warp through a 3 x 3 matrix (affine or perspective),
// flips. One geometry throughout: pixel (i, j) covers [i, i+1) x [j, j+1),
// and each output pixel is its centre mapped back into the source, so a box
// drawn around whole pixels moves exactly with them.
//
// Functions only; thread-safe; one allocation per output image (and one
// row buffer for an area resize), none per pixel.
#ifndef ELASTRUN_TRAINER_DETECT_RESAMPLE_H_
#define ELASTRUN_TRAINER_DETECT_RESAMPLE_H_

#include <array>
#include <cstdint>

#include "trainer/detect/image.h"

namespace elastrun::trainer::detect {

enum class Interpolation {
  kBilinear,  // OpenCV's INTER_LINEAR: 2 x 2 neighbours, edges replicated
  kArea,      // OpenCV's INTER_AREA when shrinking: the mean of the covered
              // source area; bilinear when enlarging
};

// `src` scaled by `scale` (> 0) into an out_width x out_height image: output
// pixel x covers source [x / scale, (x + 1) / scale), and so for y.
Image ResizeImage(const Image& src, double scale, int out_width, int out_height,
                  Interpolation interpolation);

// YOLOv5's load_image after the decode: `src` scaled so its longer side is
// `size` (returned as it is when it already is), the shorter side
// ceil(side * gain) pixels; `*gain` receives the scale.
Image ResizeLongSide(Image src, int size, Interpolation interpolation, float* gain);

// dst = src warped by `m` (src -> dst, row-major 3 x 3; perspective when its
// last row is not (0, 0, 1)): each dst pixel centre mapped back by m's
// inverse, sampled bilinearly, outside the source `border` (as OpenCV's
// BORDER_CONSTANT, which blends border into the edge pixels). A singular m
// gives all border.
Image WarpImage(const Image& src, const std::array<double, 9>& m, int out_width,
                int out_height, uint8_t border);

// In place.
void FlipLeftRight(Image* im);
void FlipUpDown(Image* im);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_RESAMPLE_H_
