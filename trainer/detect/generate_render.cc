#include "trainer/detect/generate_render.h"

#include <algorithm>
#include <cstdlib>

namespace elastrun::trainer::detect {
namespace {

constexpr int kPlacementTries = 20;
// Noise on the background: up to +-this per channel.
constexpr int kMaxNoise = 40;
// The stretch of an object's width against its height, in 1/1000.
constexpr int kMinStretch = 750;
constexpr int kMaxStretch = 1333;
// Colours tried for an object; the one standing out most is drawn.
constexpr int kColourTries = 8;

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct Box {
  int x0, y0, x1, y1;  // inclusive
  int64_t area() const { return int64_t{x1 - x0 + 1} * (y1 - y0 + 1); }
};

int64_t Intersection(const Box& a, const Box& b) {
  const int w = std::min(a.x1, b.x1) - std::max(a.x0, b.x0) + 1;
  const int h = std::min(a.y1, b.y1) - std::max(a.y0, b.y0) + 1;
  return w > 0 && h > 0 ? int64_t{w} * h : 0;
}

// The extent of the pixels above kInkThreshold; false when there are none.
bool InkExtent(const uint8_t* item, int rows, int cols, Box* box) {
  *box = {cols, rows, -1, -1};
  for (int y = 0; y < rows; ++y) {
    for (int x = 0; x < cols; ++x) {
      if (item[y * cols + x] <= kInkThreshold) continue;
      box->x0 = std::min(box->x0, x);
      box->x1 = std::max(box->x1, x);
      box->y0 = std::min(box->y0, y);
      box->y1 = std::max(box->y1, y);
    }
  }
  return box->x1 >= box->x0;
}

// Source position (1/256 pixel) of target pixel `t` of `n` over `m` source
// pixels, centres aligned, clamped to [0, m - 1].
int SourcePos(int t, int n, int m) {
  const int64_t pos = (int64_t{2 * t + 1} * m * 256) / (2 * int64_t{n}) - 128;
  return static_cast<int>(std::clamp<int64_t>(pos, 0, int64_t{m - 1} * 256));
}

void Background(Rng& rng, Image* canvas) {
  uint8_t c0[3], c1[3];
  for (int c = 0; c < 3; ++c) {
    c0[c] = static_cast<uint8_t>(rng.Below(256));
    c1[c] = static_cast<uint8_t>(rng.Below(256));
  }
  const int direction = static_cast<int>(rng.Below(4));
  const int noise = rng.Between(0, kMaxNoise);
  const int span = std::max(canvas->width + canvas->height - 2, 1);
  for (int y = 0; y < canvas->height; ++y) {
    for (int x = 0; x < canvas->width; ++x) {
      int t;  // 0..256 along the gradient
      switch (direction) {
        case 0:
          t = x * 256 / std::max(canvas->width - 1, 1);
          break;
        case 1:
          t = y * 256 / std::max(canvas->height - 1, 1);
          break;
        case 2:
          t = (x + y) * 256 / span;
          break;
        default:
          t = (x + canvas->height - 1 - y) * 256 / span;
          break;
      }
      const uint64_t bits = rng.Next();
      uint8_t* p = canvas->at(x, y);
      for (int c = 0; c < 3; ++c) {
        const int base = (c0[c] * (256 - t) + c1[c] * t) >> 8;
        const int r =
            static_cast<int>((((bits >> (16 * c)) & 0xffff) * (2 * noise + 1)) >> 16);
        p[c] = static_cast<uint8_t>(std::clamp(base + r - noise, 0, 255));
      }
    }
  }
}

// Of a few random colours, the one farthest from the canvas's mean colour
// under `box`.
void PickColour(Rng& rng, const Image& canvas, const Box& box, uint8_t colour[3]) {
  int64_t sum[3] = {0, 0, 0};
  for (int y = box.y0; y <= box.y1; ++y) {
    for (int x = box.x0; x <= box.x1; ++x) {
      for (int c = 0; c < 3; ++c) sum[c] += canvas.at(x, y)[c];
    }
  }
  int best = -1;
  for (int k = 0; k < kColourTries; ++k) {
    uint8_t candidate[3];
    int distance = 0;
    for (int c = 0; c < 3; ++c) {
      candidate[c] = static_cast<uint8_t>(rng.Below(256));
      distance += std::abs(candidate[c] - static_cast<int>(sum[c] / box.area()));
    }
    if (distance > best) {
      best = distance;
      std::copy(candidate, candidate + 3, colour);
    }
  }
}

}  // namespace

Rng::Rng(uint64_t seed, uint64_t split, uint64_t index)
    : state_(Mix(Mix(Mix(seed + 0x9e3779b97f4a7c15ULL) ^ split) + index)) {}

uint64_t Rng::Next() {
  state_ += 0x9e3779b97f4a7c15ULL;
  return Mix(state_);
}

uint32_t Rng::Below(uint32_t n) {
  return static_cast<uint32_t>(((Next() >> 32) * n) >> 32);
}

int Rng::Between(int lo, int hi) {
  return lo + static_cast<int>(Below(static_cast<uint32_t>(hi - lo + 1)));
}

ItemMask ScaleItem(const uint8_t* item, int rows, int cols, int width, int height) {
  ItemMask mask;
  mask.width = width;
  mask.height = height;
  mask.alpha.assign(static_cast<size_t>(width) * height, 0);
  Box ink;
  if (!InkExtent(item, rows, cols, &ink)) return mask;
  const int cw = ink.x1 - ink.x0 + 1, ch = ink.y1 - ink.y0 + 1;
  const auto at = [&](int x, int y) { return item[(ink.y0 + y) * cols + ink.x0 + x]; };
  // A faint item is drawn as boldly as a dark one: its brightest pixel
  // becomes opaque.
  int brightest = 0;
  for (int i = 0; i < rows * cols; ++i) brightest = std::max<int>(brightest, item[i]);
  mask.x0 = width;
  mask.y0 = height;
  for (int ty = 0; ty < height; ++ty) {
    const int sy = SourcePos(ty, height, ch), iy = sy >> 8, fy = sy & 255;
    const int iy1 = std::min(iy + 1, ch - 1);
    for (int tx = 0; tx < width; ++tx) {
      const int sx = SourcePos(tx, width, cw), ix = sx >> 8, fx = sx & 255;
      const int ix1 = std::min(ix + 1, cw - 1);
      const int top = at(ix, iy) * (256 - fx) + at(ix1, iy) * fx;
      const int bottom = at(ix, iy1) * (256 - fx) + at(ix1, iy1) * fx;
      const int value = (top * (256 - fy) + bottom * fy + 32768) >> 16;
      if (value <= kInkThreshold) continue;
      mask.alpha[static_cast<size_t>(ty) * width + tx] = static_cast<uint8_t>(
          std::min((value - kInkThreshold) * 255 / (brightest - kInkThreshold), 255));
      mask.x0 = std::min(mask.x0, tx);
      mask.x1 = std::max(mask.x1, tx);
      mask.y0 = std::min(mask.y0, ty);
      mask.y1 = std::max(mask.y1, ty);
    }
  }
  if (mask.x1 < 0) mask.x0 = mask.y0 = 0;
  return mask;
}

void DrawItem(const ItemMask& mask, int x, int y, const uint8_t colour[3],
              Image* canvas) {
  for (int my = 0; my < mask.height; ++my) {
    for (int mx = 0; mx < mask.width; ++mx) {
      const int a = mask.alpha[static_cast<size_t>(my) * mask.width + mx];
      if (a == 0) continue;
      uint8_t* p = canvas->at(x + mx, y + my);
      for (int c = 0; c < 3; ++c) {
        p[c] = static_cast<uint8_t>((p[c] * (255 - a) + colour[c] * a + 127) / 255);
      }
    }
  }
}

RenderedImage RenderImage(const ItemSet& items, const RenderOptions& options,
                          uint64_t seed, int split, int64_t index) {
  Rng rng(seed, static_cast<uint64_t>(split), static_cast<uint64_t>(index));
  const int size = options.image_size;
  RenderedImage out;
  out.image = Image(size, size);
  Background(rng, &out.image);
  std::vector<Box> placed;
  const int objects = rng.Between(options.min_objects, options.max_objects);
  for (int o = 0; o < objects; ++o) {
    const int64_t item = rng.Below(static_cast<uint32_t>(items.count));
    const uint8_t* pixels = items.pixels + item * items.rows * items.cols;
    const int side =
        rng.Between(options.min_object_size, std::min(options.max_object_size, size));
    const int stretch = rng.Between(kMinStretch, kMaxStretch);
    Box ink;
    if (!InkExtent(pixels, items.rows, items.cols, &ink)) continue;
    const int iw = ink.x1 - ink.x0 + 1, ih = ink.y1 - ink.y0 + 1;
    // The longer side becomes `side`, then the width is stretched.
    int w = iw >= ih ? side : side * iw / ih;
    int h = iw >= ih ? side * ih / iw : side;
    w = std::clamp(w * stretch / 1000, 1, size);
    h = std::clamp(h, 1, size);
    const ItemMask mask = ScaleItem(pixels, items.rows, items.cols, w, h);
    if (mask.empty()) continue;
    bool fits = false;
    Box box{};
    int x = 0, y = 0;
    for (int attempt = 0; attempt < kPlacementTries && !fits; ++attempt) {
      x = static_cast<int>(rng.Below(static_cast<uint32_t>(size - w + 1)));
      y = static_cast<int>(rng.Below(static_cast<uint32_t>(size - h + 1)));
      box = {x + mask.x0, y + mask.y0, x + mask.x1, y + mask.y1};
      fits = std::all_of(placed.begin(), placed.end(), [&](const Box& other) {
        const double shared = static_cast<double>(Intersection(box, other));
        return shared <= options.max_cover * static_cast<double>(other.area()) &&
               shared <= options.max_cover * static_cast<double>(box.area());
      });
    }
    if (!fits) continue;
    uint8_t colour[3];
    PickColour(rng, out.image, box, colour);
    DrawItem(mask, x, y, colour, &out.image);
    placed.push_back(box);
    Label label;
    label.cls = items.classes[item];
    label.cx = static_cast<float>(box.x0 + box.x1 + 1) / 2 / static_cast<float>(size);
    label.cy = static_cast<float>(box.y0 + box.y1 + 1) / 2 / static_cast<float>(size);
    label.w = static_cast<float>(box.x1 - box.x0 + 1) / static_cast<float>(size);
    label.h = static_cast<float>(box.y1 - box.y0 + 1) / static_cast<float>(size);
    out.labels.push_back(label);
  }
  return out;
}

}  // namespace elastrun::trainer::detect
