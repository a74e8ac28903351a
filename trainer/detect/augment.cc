#include "trainer/detect/augment.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/xoshiro.h"

namespace elastrun::trainer::detect {
namespace {

constexpr uint8_t kFill = 114;  // YOLOv5's pad and border grey
constexpr double kPi = 3.14159265358979323846;


uint8_t RoundToByte(float v) {
  return static_cast<uint8_t>(std::clamp(v + 0.5f, 0.0f, 255.0f));
}

std::array<double, 9> Multiply(const std::array<double, 9>& a,
                               const std::array<double, 9>& b) {
  std::array<double, 9> r{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 3; ++k) r[i * 3 + j] += a[i * 3 + k] * b[k * 3 + j];
    }
  }
  return r;
}

constexpr std::array<double, 9> kIdentity = {1, 0, 0, 0, 1, 0, 0, 0, 1};

struct Point {
  double x, y;
};

// The part of the convex polygon `poly` inside [0, width] x [0, height]
// (Sutherland-Hodgman, one frame side at a time); empty when none is.
std::vector<Point> ClipToFrame(std::vector<Point> poly, double width, double height) {
  // Each side as "inside when dot(normal, p) <= limit".
  const struct {
    double nx, ny, limit;
  } sides[4] = {{-1, 0, 0}, {1, 0, width}, {0, -1, 0}, {0, 1, height}};
  for (const auto& side : sides) {
    std::vector<Point> out;
    for (size_t i = 0; i < poly.size(); ++i) {
      const Point& p = poly[i];
      const Point& q = poly[(i + 1) % poly.size()];
      const double dp = side.nx * p.x + side.ny * p.y - side.limit;
      const double dq = side.nx * q.x + side.ny * q.y - side.limit;
      if (dp <= 0) out.push_back(p);
      if ((dp < 0 && dq > 0) || (dp > 0 && dq < 0)) {
        const double t = dp / (dp - dq);
        out.push_back({p.x + t * (q.x - p.x), p.y + t * (q.y - p.y)});
      }
    }
    poly = std::move(out);
    if (poly.empty()) break;
  }
  return poly;
}

// OpenCV's fixed-point tables of its 8-bit RGB -> HSV (hsv_shift 12).
struct HsvTables {
  int sdiv[256];
  int hdiv[256];
  HsvTables() {
    sdiv[0] = hdiv[0] = 0;
    for (int i = 1; i < 256; ++i) {
      sdiv[i] = static_cast<int>(std::nearbyint((255 << 12) / (1.0 * i)));
      hdiv[i] = static_cast<int>(std::nearbyint((180 << 12) / (6.0 * i)));
    }
  }
};

}  // namespace

absl::Status CheckAugmentOptions(const AugmentOptions& hyp) {
  const struct {
    const char* key;
    double value;
    double max;  // inclusive
  } keys[] = {
      {"hsv_h", hyp.hsv_h, 1},         {"hsv_s", hyp.hsv_s, 1},
      {"hsv_v", hyp.hsv_v, 1},         {"degrees", hyp.degrees, 360},
      {"translate", hyp.translate, 1}, {"scale", hyp.scale, 0.99},
      {"shear", hyp.shear, 89},        {"perspective", hyp.perspective, 0.001},
      {"flipud", hyp.flipud, 1},       {"fliplr", hyp.fliplr, 1},
      {"mosaic", hyp.mosaic, 1},       {"mixup", hyp.mixup, 1},
  };
  for (const auto& k : keys) {
    if (!(k.value >= 0 && k.value <= k.max)) {
      return absl::InvalidArgumentError(absl::StrCat("hyp.", k.key, " is ", k.value,
                                                     ": it must be in [0, ", k.max, "]"));
    }
  }
  return absl::OkStatus();
}

SampleRng::SampleRng(uint64_t seed, int64_t epoch, int64_t index) {
  uint64_t x = seed;
  uint64_t h = SplitMix64(x);
  x = h ^ static_cast<uint64_t>(epoch);
  h = SplitMix64(x);
  x = h ^ static_cast<uint64_t>(index);
  for (uint64_t& s : s_) s = SplitMix64(x);
}

uint64_t SampleRng::Next() { return Xoshiro256Next(s_.data()); }

double SampleRng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

int64_t SampleRng::Below(int64_t n) {
  return static_cast<int64_t>(
      (static_cast<unsigned __int128>(Next()) * static_cast<uint64_t>(n)) >> 64);
}

double SampleRng::Normal() {  // Marsaglia's polar method
  for (;;) {
    const double u = Uniform(-1, 1), v = Uniform(-1, 1);
    const double s = u * u + v * v;
    if (s > 0 && s < 1) return u * std::sqrt(-2 * std::log(s) / s);
  }
}

double SampleRng::Gamma(double a) {  // Marsaglia and Tsang, a >= 1
  const double d = a - 1.0 / 3, c = 1 / std::sqrt(9 * d);
  for (;;) {
    double x, v;
    do {
      x = Normal();
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = Uniform();
    if (u < 1 - 0.0331 * x * x * x * x) return d * v;
    if (u > 0 && std::log(u) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v;
  }
}

double SampleRng::Beta(double a, double b) {
  const double x = Gamma(a), y = Gamma(b);
  return x / (x + y);
}

Image Letterbox(const Image& src, int size, Placement* placement) {
  // YOLOv5: top, left = round(d - 0.1) of the half padding d; never a tie.
  const int left = static_cast<int>(std::floor((size - src.width) / 2.0 - 0.1 + 0.5));
  const int top = static_cast<int>(std::floor((size - src.height) / 2.0 - 0.1 + 0.5));
  Image out(size, size);
  std::fill(out.pixels.begin(), out.pixels.end(), kFill);
  for (int y = 0; y < src.height; ++y) {
    std::memcpy(out.at(left, top + y), src.at(0, y), static_cast<size_t>(src.width) * 3);
  }
  placement->pad_x += static_cast<float>(left);
  placement->pad_y += static_cast<float>(top);
  return out;
}

std::vector<PixelBox> ToPixelBoxes(const std::vector<Label>& labels, double width,
                                   double height, double pad_x, double pad_y) {
  std::vector<PixelBox> boxes;
  boxes.reserve(labels.size());
  for (const Label& l : labels) {
    boxes.push_back(
        {width * (l.cx - l.w / 2.0) + pad_x, height * (l.cy - l.h / 2.0) + pad_y,
         width * (l.cx + l.w / 2.0) + pad_x, height * (l.cy + l.h / 2.0) + pad_y, l.cls});
  }
  return boxes;
}

std::vector<Label> ToLabels(const std::vector<PixelBox>& boxes, int width, int height) {
  constexpr double kEps = 1e-3;
  std::vector<Label> labels;
  labels.reserve(boxes.size());
  for (const PixelBox& b : boxes) {
    const double x1 = std::clamp(b.x1, 0.0, width - kEps);
    const double x2 = std::clamp(b.x2, 0.0, width - kEps);
    const double y1 = std::clamp(b.y1, 0.0, height - kEps);
    const double y2 = std::clamp(b.y2, 0.0, height - kEps);
    labels.push_back({b.cls, static_cast<float>((x1 + x2) / 2 / width),
                      static_cast<float>((y1 + y2) / 2 / height),
                      static_cast<float>((x2 - x1) / width),
                      static_cast<float>((y2 - y1) / height)});
  }
  return labels;
}

Image MosaicCanvas(const std::array<MosaicTile, 4>& tiles, int size, int xc, int yc,
                   std::vector<PixelBox>* boxes) {
  const int s2 = 2 * size;
  Image canvas(s2, s2);
  std::fill(canvas.pixels.begin(), canvas.pixels.end(), kFill);
  for (int i = 0; i < 4; ++i) {
    const Image& im = *tiles[i].image;
    const int w = im.width, h = im.height;
    int x1a, y1a, x2a, y2a, x1b, y1b;  // canvas region a, tile region b
    switch (i) {
      case 0:  // top left
        x1a = std::max(xc - w, 0), y1a = std::max(yc - h, 0), x2a = xc, y2a = yc;
        x1b = w - (x2a - x1a), y1b = h - (y2a - y1a);
        break;
      case 1:  // top right
        x1a = xc, y1a = std::max(yc - h, 0), x2a = std::min(xc + w, s2), y2a = yc;
        x1b = 0, y1b = h - (y2a - y1a);
        break;
      case 2:  // bottom left
        x1a = std::max(xc - w, 0), y1a = yc, x2a = xc, y2a = std::min(s2, yc + h);
        x1b = w - (x2a - x1a), y1b = 0;
        break;
      default:  // bottom right
        x1a = xc, y1a = yc, x2a = std::min(xc + w, s2), y2a = std::min(s2, yc + h);
        x1b = 0, y1b = 0;
        break;
    }
    for (int y = y1a; y < y2a; ++y) {
      std::memcpy(canvas.at(x1a, y), im.at(x1b, y1b + (y - y1a)),
                  static_cast<size_t>(x2a - x1a) * 3);
    }
    const double pad_x = x1a - x1b, pad_y = y1a - y1b;
    for (PixelBox b : tiles[i].boxes) {
      b.x1 = std::clamp<double>(b.x1 + pad_x, 0, s2);
      b.x2 = std::clamp<double>(b.x2 + pad_x, 0, s2);
      b.y1 = std::clamp<double>(b.y1 + pad_y, 0, s2);
      b.y2 = std::clamp<double>(b.y2 + pad_y, 0, s2);
      boxes->push_back(b);
    }
  }
  return canvas;
}

Perspective DrawPerspective(int src_width, int src_height, int out_width, int out_height,
                            const AugmentOptions& hyp, SampleRng* rng) {
  const std::array<double, 9> c = {1, 0, -src_width / 2.0, 0, 1, -src_height / 2.0, 0,
                                   0, 1};
  std::array<double, 9> p = kIdentity;
  p[6] = rng->Uniform(-hyp.perspective, hyp.perspective);
  p[7] = rng->Uniform(-hyp.perspective, hyp.perspective);
  const double a = rng->Uniform(-hyp.degrees, hyp.degrees) * kPi / 180;
  const double s = rng->Uniform(1 - hyp.scale, 1 + hyp.scale);
  // OpenCV's getRotationMatrix2D(centre 0, a, s): counter-clockwise on screen.
  const std::array<double, 9> r = {
      s * std::cos(a), s * std::sin(a), 0, -s * std::sin(a), s * std::cos(a), 0, 0, 0, 1};
  std::array<double, 9> sh = kIdentity;
  sh[1] = std::tan(rng->Uniform(-hyp.shear, hyp.shear) * kPi / 180);
  sh[3] = std::tan(rng->Uniform(-hyp.shear, hyp.shear) * kPi / 180);
  std::array<double, 9> t = kIdentity;
  t[2] = rng->Uniform(0.5 - hyp.translate, 0.5 + hyp.translate) * out_width;
  t[5] = rng->Uniform(0.5 - hyp.translate, 0.5 + hyp.translate) * out_height;
  return {Multiply(t, Multiply(sh, Multiply(r, Multiply(p, c)))), s};
}

bool BoxCandidate(const PixelBox& before, const PixelBox& after, double scale) {
  constexpr double kEps = 1e-16;
  const double w1 = (before.x2 - before.x1) * scale, h1 = (before.y2 - before.y1) * scale;
  const double w2 = after.x2 - after.x1, h2 = after.y2 - after.y1;
  const double ar = std::max(w2 / (h2 + kEps), h2 / (w2 + kEps));
  return w2 > 2 && h2 > 2 && w2 * h2 / (w1 * h1 + kEps) > 0.1 && ar < 100;
}

Image RandomPerspective(const Image& src, int border, const AugmentOptions& hyp,
                        SampleRng* rng, std::vector<PixelBox>* boxes) {
  const int width = src.width + 2 * border, height = src.height + 2 * border;
  const Perspective draw =
      DrawPerspective(src.width, src.height, width, height, hyp, rng);
  const std::array<double, 9>& m = draw.m;
  Image out =
      (border != 0 || m != kIdentity) ? WarpImage(src, m, width, height, kFill) : src;
  std::vector<PixelBox> kept;
  kept.reserve(boxes->size());
  for (const PixelBox& b : *boxes) {
    const double xs[4] = {b.x1, b.x2, b.x2, b.x1}, ys[4] = {b.y1, b.y1, b.y2, b.y2};
    std::vector<Point> corners;
    for (int k = 0; k < 4; ++k) {
      const double w = m[6] * xs[k] + m[7] * ys[k] + m[8];
      corners.push_back({(m[0] * xs[k] + m[1] * ys[k] + m[2]) / w,
                         (m[3] * xs[k] + m[4] * ys[k] + m[5]) / w});
    }
    const std::vector<Point> visible = ClipToFrame(std::move(corners), width, height);
    PixelBox a = b;
    a.x1 = a.y1 = a.x2 = a.y2 = 0;  // nothing visible: dropped below
    if (!visible.empty()) {
      a.x1 = a.x2 = visible[0].x;
      a.y1 = a.y2 = visible[0].y;
      for (const Point& q : visible) {
        a.x1 = std::min(a.x1, q.x), a.x2 = std::max(a.x2, q.x);
        a.y1 = std::min(a.y1, q.y), a.y2 = std::max(a.y2, q.y);
      }
    }
    if (BoxCandidate(b, a, draw.scale)) kept.push_back(a);
  }
  *boxes = std::move(kept);
  return out;
}

void Mixup(Image* im, const Image& other, double r) {
  for (size_t i = 0; i < im->pixels.size(); ++i) {
    im->pixels[i] = static_cast<uint8_t>(im->pixels[i] * r + other.pixels[i] * (1 - r));
  }
}

void ApplyHsvGains(Image* im, double gain_h, double gain_s, double gain_v) {
  static const HsvTables kTables;
  uint8_t lut_h[256], lut_s[256], lut_v[256];
  for (int x = 0; x < 256; ++x) {
    lut_h[x] = static_cast<uint8_t>(std::fmod(x * gain_h, 180.0));
    lut_s[x] = static_cast<uint8_t>(std::clamp(x * gain_s, 0.0, 255.0));
    lut_v[x] = static_cast<uint8_t>(std::clamp(x * gain_v, 0.0, 255.0));
  }
  // OpenCV's HSV -> RGB: the sector's (r, g, b) as indices into
  // {v, v(1 - s), v(1 - s f), v(1 - s(1 - f))}.
  static constexpr int kSector[6][3] = {{0, 3, 1}, {2, 0, 1}, {1, 0, 3},
                                        {1, 2, 0}, {3, 1, 0}, {0, 1, 2}};
  constexpr int kShift = 12, kHalf = 1 << (kShift - 1);
  uint8_t* p = im->pixels.data();
  for (size_t n = im->pixels.size() / 3; n > 0; --n, p += 3) {
    const int r = p[0], g = p[1], b = p[2];
    const int v = std::max({r, g, b});
    const int diff = v - std::min({r, g, b});
    const int s = (diff * kTables.sdiv[v] + kHalf) >> kShift;
    int h = v == r ? g - b : v == g ? b - r + 2 * diff : r - g + 4 * diff;
    h = (h * kTables.hdiv[diff] + kHalf) >> kShift;
    if (h < 0) h += 180;
    const float hh = lut_h[h], ss = lut_s[s] * (1.0f / 255), vv = lut_v[v] * (1.0f / 255);
    if (ss == 0) {
      p[0] = p[1] = p[2] = RoundToByte(vv * 255);
      continue;
    }
    float f = hh * (6.0f / 180);
    int sector = static_cast<int>(std::floor(f));
    f -= static_cast<float>(sector);
    if (sector < 0 || sector >= 6) sector = 0, f = 0;
    const float tab[4] = {vv, vv * (1 - ss), vv * (1 - ss * f), vv * (1 - ss * (1 - f))};
    for (int c = 0; c < 3; ++c) p[c] = RoundToByte(tab[kSector[sector][c]] * 255);
  }
}

void AugmentHsv(Image* im, const AugmentOptions& hyp, SampleRng* rng) {
  if (hyp.hsv_h == 0 && hyp.hsv_s == 0 && hyp.hsv_v == 0) return;
  const double gh = rng->Uniform(-1, 1) * hyp.hsv_h + 1;
  const double gs = rng->Uniform(-1, 1) * hyp.hsv_s + 1;
  const double gv = rng->Uniform(-1, 1) * hyp.hsv_v + 1;
  ApplyHsvGains(im, gh, gs, gv);
}

}  // namespace elastrun::trainer::detect
