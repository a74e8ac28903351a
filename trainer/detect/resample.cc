#include "trainer/detect/resample.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>

namespace elastrun::trainer::detect {
namespace {

uint8_t RoundToByte(float v) {
  return static_cast<uint8_t>(std::clamp(v + 0.5f, 0.0f, 255.0f));
}

// One axis of a bilinear resize: for output i, the two source indices (times
// 3, for RGB rows) and the second one's weight.
struct LinearTaps {
  std::vector<int> lo, hi;
  std::vector<float> w;
};

LinearTaps BilinearTaps(int src, int out, double scale) {
  LinearTaps t;
  t.lo.resize(out);
  t.hi.resize(out);
  t.w.resize(out);
  for (int i = 0; i < out; ++i) {
    const double s = std::max(0.0, (i + 0.5) / scale - 0.5);
    int i0 = static_cast<int>(s);
    double f = s - i0;
    if (i0 >= src - 1) i0 = src - 1, f = 0;
    t.lo[i] = i0;
    t.hi[i] = std::min(i0 + 1, src - 1);
    t.w[i] = static_cast<float>(f);
  }
  return t;
}

// One axis of an area resize: output i is the weighted sum of source
// first[i] .. first[i] + weights[i].size() - 1.
struct AreaTaps {
  std::vector<int> first;
  std::vector<std::vector<float>> weights;
};

AreaTaps AreaWeights(int src, int out, double scale) {
  AreaTaps t;
  t.first.resize(out);
  t.weights.resize(out);
  for (int i = 0; i < out; ++i) {
    const double a = i / scale, b = std::min<double>((i + 1) / scale, src);
    const int first = std::min(static_cast<int>(a), src - 1);
    double total = 0;
    std::vector<float>& w = t.weights[i];
    for (int j = first; j < src && j < b; ++j) {
      const double overlap = std::min<double>(j + 1, b) - std::max<double>(j, a);
      w.push_back(static_cast<float>(std::max(0.0, overlap)));
      total += w.back();
    }
    if (w.empty() || total <= 0) {  // past the source's end: take its last pixel
      w.assign(1, 1.0f);
      total = 1;
    }
    for (float& x : w) x = static_cast<float>(x / total);
    t.first[i] = first;
  }
  return t;
}

Image ResizeBilinear(const Image& src, double scale, int out_w, int out_h) {
  Image out(out_w, out_h);
  const LinearTaps xs = BilinearTaps(src.width, out_w, scale);
  const LinearTaps ys = BilinearTaps(src.height, out_h, scale);
  for (int y = 0; y < out_h; ++y) {
    const uint8_t* r0 = src.at(0, ys.lo[y]);
    const uint8_t* r1 = src.at(0, ys.hi[y]);
    const float fy = ys.w[y];
    uint8_t* o = out.at(0, y);
    for (int x = 0; x < out_w; ++x) {
      const int a = xs.lo[x] * 3, b = xs.hi[x] * 3;
      const float fx = xs.w[x];
      for (int c = 0; c < 3; ++c) {
        const float top = r0[a + c] + fx * (r0[b + c] - r0[a + c]);
        const float bottom = r1[a + c] + fx * (r1[b + c] - r1[a + c]);
        o[x * 3 + c] = RoundToByte(top + fy * (bottom - top));
      }
    }
  }
  return out;
}

Image ResizeArea(const Image& src, double scale, int out_w, int out_h) {
  const AreaTaps xs = AreaWeights(src.width, out_w, scale);
  const AreaTaps ys = AreaWeights(src.height, out_h, scale);
  // Rows first (every source row, output columns), then columns.
  std::vector<float> rows(static_cast<size_t>(src.height) * out_w * 3);
  for (int y = 0; y < src.height; ++y) {
    const uint8_t* s = src.at(0, y);
    float* r = &rows[static_cast<size_t>(y) * out_w * 3];
    for (int x = 0; x < out_w; ++x) {
      float acc[3] = {0, 0, 0};
      const std::vector<float>& w = xs.weights[x];
      for (size_t k = 0; k < w.size(); ++k) {
        const uint8_t* p = s + (xs.first[x] + k) * 3;
        for (int c = 0; c < 3; ++c) acc[c] += w[k] * p[c];
      }
      for (int c = 0; c < 3; ++c) r[x * 3 + c] = acc[c];
    }
  }
  Image out(out_w, out_h);
  std::vector<float> acc(static_cast<size_t>(out_w) * 3);
  for (int y = 0; y < out_h; ++y) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    const std::vector<float>& w = ys.weights[y];
    for (size_t k = 0; k < w.size(); ++k) {
      const float* r = &rows[static_cast<size_t>(ys.first[y] + k) * out_w * 3];
      for (int i = 0; i < out_w * 3; ++i) acc[i] += w[k] * r[i];
    }
    uint8_t* o = out.at(0, y);
    for (int i = 0; i < out_w * 3; ++i) o[i] = RoundToByte(acc[i]);
  }
  return out;
}

// m^-1 of a row-major 3 x 3; false when singular.
bool Invert3x3(const std::array<double, 9>& m, std::array<double, 9>* inv) {
  const double a = m[0], b = m[1], c = m[2], d = m[3], e = m[4], f = m[5], g = m[6],
               h = m[7], i = m[8];
  const double A = e * i - f * h, B = -(d * i - f * g), C = d * h - e * g;
  const double det = a * A + b * B + c * C;
  if (!std::isfinite(det) || std::abs(det) < 1e-12) return false;
  const double k = 1 / det;
  *inv = {A * k, -(b * i - c * h) * k, (b * f - c * e) * k,
          B * k, (a * i - c * g) * k,  -(a * f - c * d) * k,
          C * k, -(a * h - b * g) * k, (a * e - b * d) * k};
  return true;
}

// Bilinear sample of `src` at (sx, sy), pixel centres at integers, with
// weights in 1/2048ths (OpenCV's warps use 1/32ths); a neighbour outside the
// image counts as `border`.
inline void SampleBilinear(const Image& src, double sx, double sy, uint8_t border,
                           uint8_t* out) {
  constexpr int kBits = 11, kOne = 1 << kBits;
  if (!(sx > -1 && sy > -1 && sx < src.width && sy < src.height)) {  // NaN too
    out[0] = out[1] = out[2] = border;
    return;
  }
  const int64_t qx = static_cast<int64_t>(std::floor(sx * kOne));
  const int64_t qy = static_cast<int64_t>(std::floor(sy * kOne));
  const int x0 = static_cast<int>(qx >> kBits), y0 = static_cast<int>(qy >> kBits);
  const int fx = static_cast<int>(qx & (kOne - 1)),
            fy = static_cast<int>(qy & (kOne - 1));
  const int row = src.width * 3;
  const uint8_t* p =
      src.pixels.data() + (static_cast<ptrdiff_t>(y0) * src.width + x0) * 3;
  if (x0 >= 0 && y0 >= 0 && x0 + 1 < src.width && y0 + 1 < src.height) {
    for (int c = 0; c < 3; ++c) {
      const int top = p[c] * (kOne - fx) + p[c + 3] * fx;
      const int bottom = p[row + c] * (kOne - fx) + p[row + c + 3] * fx;
      out[c] = static_cast<uint8_t>((top * (kOne - fy) + bottom * fy + (1 << 21)) >> 22);
    }
    return;
  }
  const bool l = x0 >= 0, r = x0 + 1 < src.width, t = y0 >= 0, b = y0 + 1 < src.height;
  for (int c = 0; c < 3; ++c) {
    const int p00 = l && t ? p[c] : border, p01 = r && t ? p[c + 3] : border;
    const int p10 = l && b ? p[row + c] : border, p11 = r && b ? p[row + c + 3] : border;
    const int top = p00 * (kOne - fx) + p01 * fx, bottom = p10 * (kOne - fx) + p11 * fx;
    out[c] = static_cast<uint8_t>((top * (kOne - fy) + bottom * fy + (1 << 21)) >> 22);
  }
}

}  // namespace

Image ResizeImage(const Image& src, double scale, int out_width, int out_height,
                  Interpolation interpolation) {
  if (interpolation == Interpolation::kArea && scale < 1) {
    return ResizeArea(src, scale, out_width, out_height);
  }
  return ResizeBilinear(src, scale, out_width, out_height);
}

Image ResizeLongSide(Image src, int size, Interpolation interpolation, float* gain) {
  const int long_side = std::max(src.width, src.height);
  const double r = static_cast<double>(size) / long_side;
  *gain = static_cast<float>(r);
  if (long_side == size) return src;
  // ceil as YOLOv5's load_image; the 1e-6 keeps w * (size / w) at size.
  const auto side = [&](int s) {
    return std::clamp(static_cast<int>(std::ceil(s * r - 1e-6)), 1, size);
  };
  return ResizeImage(src, r, side(src.width), side(src.height), interpolation);
}

Image WarpImage(const Image& src, const std::array<double, 9>& m, int out_width,
                int out_height, uint8_t border) {
  Image out(out_width, out_height);
  std::array<double, 9> inv;
  if (!Invert3x3(m, &inv)) {
    std::fill(out.pixels.begin(), out.pixels.end(), border);
    return out;
  }
  const bool affine = inv[6] == 0 && inv[7] == 0;
  for (int y = 0; y < out_height; ++y) {
    const double cy = y + 0.5;
    uint8_t* o = out.at(0, y);
    if (affine) {
      // Source of pixel x's centre, minus the half pixel of the sampler's
      // integer centres: linear in x.
      const double bx = inv[0] * 0.5 + inv[1] * cy + inv[2] - 0.5;
      const double by = inv[3] * 0.5 + inv[4] * cy + inv[5] - 0.5;
      for (int x = 0; x < out_width; ++x, o += 3) {
        SampleBilinear(src, bx + inv[0] * x, by + inv[3] * x, border, o);
      }
      continue;
    }
    for (int x = 0; x < out_width; ++x, o += 3) {
      const double cx = x + 0.5;
      const double w = inv[6] * cx + inv[7] * cy + inv[8];
      if (!(w > 1e-12)) {  // behind the projection: nothing of the source
        o[0] = o[1] = o[2] = border;
        continue;
      }
      SampleBilinear(src, (inv[0] * cx + inv[1] * cy + inv[2]) / w - 0.5,
                     (inv[3] * cx + inv[4] * cy + inv[5]) / w - 0.5, border, o);
    }
  }
  return out;
}

void FlipLeftRight(Image* im) {
  for (int y = 0; y < im->height; ++y) {
    uint8_t* a = im->at(0, y);
    uint8_t* b = im->at(im->width - 1, y);
    for (; a < b; a += 3, b -= 3) std::swap_ranges(a, a + 3, b);
  }
}

void FlipUpDown(Image* im) {
  const size_t row = static_cast<size_t>(im->width) * 3;
  for (int y = 0, z = im->height - 1; y < z; ++y, --z) {
    std::swap_ranges(im->at(0, y), im->at(0, y) + row, im->at(0, z));
  }
}

}  // namespace elastrun::trainer::detect
