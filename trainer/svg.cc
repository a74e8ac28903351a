#include "trainer/svg.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace elastrun::trainer::svg {
namespace {

constexpr double kTickFont = 10;
constexpr double kLabelFont = 11;
constexpr double kTitleFont = 13;
constexpr double kLegendFont = 10;

bool Finite(const std::pair<double, double>& p) {
  return std::isfinite(p.first) && std::isfinite(p.second);
}

// [lo, hi] of the finite coordinates `pick` takes from the points; lo > hi
// when there are none.
template <typename Pick>
Range Extent(const std::vector<Line>& lines, Pick pick) {
  Range r{1e300, -1e300};
  for (const Line& line : lines) {
    for (const auto& p : line.points) {
      if (!Finite(p)) continue;
      r.lo = std::min(r.lo, pick(p));
      r.hi = std::max(r.hi, pick(p));
    }
  }
  return r;
}

// An unset range from the data's extent, with a 5% margin each side.
Range Fill(Range set, Range data) {
  if (set.lo != set.hi) return set;
  if (data.lo > data.hi) return Range{0, 1};
  // Equal but for rounding (a smoothed single point) counts as one value.
  if (data.hi - data.lo <= 1e-9 * std::max(std::abs(data.lo), std::abs(data.hi))) {
    const double pad = data.lo == 0 ? 1 : std::abs(data.lo) * 0.1;
    return Range{data.lo - pad, data.hi + pad};
  }
  const double margin = (data.hi - data.lo) * 0.05;
  return Range{data.lo - margin, data.hi + margin};
}

double Step(const std::vector<double>& ticks) {
  return ticks.size() >= 2 ? ticks[1] - ticks[0] : 1;
}

}  // namespace

std::string Escape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double TextWidth(absl::string_view text, double font_size) {
  return 0.6 * font_size * static_cast<double>(text.size());
}

std::string Truncate(absl::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  if (max_chars <= 3) return std::string(text.substr(0, max_chars));
  return absl::StrCat(text.substr(0, max_chars - 3), "...");
}

std::string Begin(double width, double height) {
  return absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
      "viewBox='0 0 %.0f %.0f' font-family='DejaVu Sans, Arial, sans-serif'>\n"
      "<rect width='100%%' height='100%%' fill='white'/>\n",
      width, height, width, height);
}

std::string End() { return "</svg>\n"; }

std::string PaletteColor(size_t i, size_t count) {
  static const char* const kTab10[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                       "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                       "#bcbd22", "#17becf"};
  static const char* const kTab20[] = {
      "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728",
      "#ff9896", "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2",
      "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d", "#17becf", "#9edae5"};
  return count > 10 ? kTab20[i % 20] : kTab10[i % 10];
}

std::vector<double> NiceTicks(double lo, double hi, int target, bool whole) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || hi < lo) return {};
  // A span lost in the rounding of its ends has one tick.
  if (hi - lo <= 1e-12 * std::max(std::abs(lo), std::abs(hi))) return {lo};
  const double raw = (hi - lo) / std::max(target, 1);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * power;
  for (double m : {1.0, 2.0, 2.5, 5.0}) {
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  }
  if (whole) step = std::max(1.0, std::round(step));
  std::vector<double> ticks;
  const double eps = step * 1e-9;
  for (double k = std::ceil((lo - eps) / step);
       k * step <= hi + eps && ticks.size() < 100; ++k) {
    const double v = k * step;
    ticks.push_back(std::abs(v) < eps ? 0.0 : v);
  }
  return ticks;
}

std::string TickLabel(double value, double step) {
  int decimals = 0;
  while (decimals < 8) {
    const double scaled = step * std::pow(10.0, decimals);
    if (std::abs(scaled - std::round(scaled)) < 1e-6 * std::max(1.0, scaled)) break;
    ++decimals;
  }
  if (std::abs(value) >= 1e6 || (value != 0 && std::abs(value) < 1e-4)) {
    return absl::StrFormat("%.3g", value);
  }
  return absl::StrFormat("%.*f", decimals, value);
}

Frame::Frame(const Axes& axes, const std::vector<Line>& lines) : axes_(axes) {
  axes_.x = Fill(axes.x, Extent(lines, [](const auto& p) { return p.first; }));
  axes_.y = Fill(axes.y, Extent(lines, [](const auto& p) { return p.second; }));
}

double Frame::X(double x) const {
  return axes_.left + (x - axes_.x.lo) / (axes_.x.hi - axes_.x.lo) * axes_.width;
}

double Frame::Y(double y) const {
  return axes_.top + axes_.height -
         (y - axes_.y.lo) / (axes_.y.hi - axes_.y.lo) * axes_.height;
}

std::string Frame::Furniture() const {
  const Axes& a = axes_;
  const double bottom = a.top + a.height;
  std::string out = "<g>\n";
  std::string grid, ticks, labels;
  double widest = 0;
  const std::vector<double> ys =
      NiceTicks(a.y.lo, a.y.hi, std::max(2, static_cast<int>(a.height / 40)));
  for (double v : ys) {
    const std::string label = TickLabel(v, Step(ys));
    widest = std::max(widest, TextWidth(label, kTickFont));
    absl::StrAppendFormat(&grid, "M%.1f %.1fH%.1f", a.left, Y(v), a.left + a.width);
    absl::StrAppendFormat(&ticks, "M%.1f %.1fh-4", a.left, Y(v));
    absl::StrAppendFormat(&labels, "<text x='%.1f' y='%.1f' text-anchor='end'>%s</text>",
                          a.left - 6, Y(v) + 3.5, label);
  }
  if (a.x_ticks) {
    const std::vector<double> xs =
        NiceTicks(a.x.lo, a.x.hi, std::max(2, static_cast<int>(a.width / 60)), a.whole_x);
    for (double v : xs) {
      absl::StrAppendFormat(&grid, "M%.1f %.1fV%.1f", X(v), a.top, bottom);
      absl::StrAppendFormat(&ticks, "M%.1f %.1fv4", X(v), bottom);
      absl::StrAppendFormat(&labels,
                            "<text x='%.1f' y='%.1f' text-anchor='middle'>%s</text>",
                            X(v), bottom + 15, TickLabel(v, Step(xs)));
    }
  }
  if (!grid.empty()) {
    absl::StrAppendFormat(&out, "<path d='%s' stroke='#e5e5e5' stroke-width='1'/>\n",
                          grid);
  }
  absl::StrAppendFormat(&out,
                        "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' "
                        "stroke='#444' stroke-width='1'/>\n",
                        a.left, a.top, a.width, a.height);
  if (!ticks.empty()) {
    absl::StrAppendFormat(&out, "<path d='%s' stroke='#444' stroke-width='1'/>\n", ticks);
  }
  absl::StrAppendFormat(&out, "<g font-size='%.0f' fill='#333'>%s</g>\n", kTickFont,
                        labels);
  if (!a.title.empty()) {
    absl::StrAppendFormat(
        &out, "<text x='%.1f' y='%.1f' font-size='%.0f' text-anchor='middle'>%s</text>\n",
        a.left + a.width / 2, a.top - 8, kTitleFont, Escape(a.title));
  }
  if (!a.x_label.empty()) {
    absl::StrAppendFormat(
        &out, "<text x='%.1f' y='%.1f' font-size='%.0f' text-anchor='middle'>%s</text>\n",
        a.left + a.width / 2, bottom + 32, kLabelFont, Escape(a.x_label));
  }
  if (!a.y_label.empty()) {
    const double x = a.left - widest - 14;
    const double y = a.top + a.height / 2;
    absl::StrAppendFormat(&out,
                          "<text x='%.1f' y='%.1f' font-size='%.0f' text-anchor='middle' "
                          "transform='rotate(-90 %.1f %.1f)'>%s</text>\n",
                          x, y, kLabelFont, x, y, Escape(a.y_label));
  }
  return out + "</g>\n";
}

std::string Frame::Lines(const std::vector<Line>& lines) const {
  std::string out;
  for (const Line& line : lines) {
    // Pixels to 0.1 px; a point in the middle of a horizontal or vertical
    // run adds nothing to the drawing (a PR envelope is mostly such runs).
    std::vector<std::pair<double, double>> px;
    for (const auto& p : line.points) {
      if (!Finite(p)) continue;
      std::pair<double, double> q{std::round(X(p.first) * 10) / 10,
                                  std::round(Y(p.second) * 10) / 10};
      if (!px.empty() && px.back() == q) continue;
      if (px.size() >= 2) {
        const auto& a = px[px.size() - 2];
        const auto& b = px.back();
        if ((a.second == b.second && b.second == q.second) ||
            (a.first == b.first && b.first == q.first)) {
          px.back() = q;
          continue;
        }
      }
      px.push_back(q);
    }
    if (px.empty()) continue;
    std::string pts;
    for (const auto& [x, y] : px) absl::StrAppendFormat(&pts, "%.1f,%.1f ", x, y);
    pts.pop_back();
    absl::StrAppendFormat(
        &out,
        "<polyline fill='none' stroke='%s' stroke-width='%.3g' "
        "stroke-linejoin='round'%s points='%s'/>\n",
        line.color, line.width,
        line.dotted ? " stroke-dasharray='1.5,3' stroke-linecap='round'" : "", pts);
    // A single point draws no line: it gets a dot whatever marker_radius says.
    const double r = line.marker_radius > 0    ? line.marker_radius
                     : line.points.size() == 1 ? line.width + 1
                                               : 0;
    if (r > 0) {
      std::string dots;
      for (const auto& p : line.points) {
        if (!Finite(p)) continue;
        absl::StrAppendFormat(&dots, "<circle cx='%.1f' cy='%.1f' r='%.3g'/>", X(p.first),
                              Y(p.second), r);
      }
      absl::StrAppendFormat(&out, "<g fill='%s'>%s</g>\n", line.color, dots);
    }
  }
  std::vector<const Line*> named;
  double widest = 0;
  for (const Line& line : lines) {
    if (line.name.empty()) continue;
    named.push_back(&line);
    widest = std::max(widest, TextWidth(line.name, kLegendFont));
  }
  if (axes_.legend == LegendPlace::kNone || named.empty()) return out;
  constexpr double kRow = 14, kSample = 22;
  const double box_w = kSample + 12 + widest, box_h = kRow * named.size() + 6;
  double x = axes_.left + axes_.width + 10, y = axes_.top;
  if (axes_.legend == LegendPlace::kInsideTopRight) {
    x = axes_.left + axes_.width - box_w - 6;
    y = axes_.top + 6;
    absl::StrAppendFormat(
        &out,
        "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='white' "
        "fill-opacity='0.85' stroke='#ccc' rx='3'/>\n",
        x, y, box_w, box_h);
  }
  out += absl::StrFormat("<g font-size='%.0f'>", kLegendFont);
  for (size_t i = 0; i < named.size(); ++i) {
    const Line& line = *named[i];
    const double row = y + 3 + kRow * (i + 0.5);
    absl::StrAppendFormat(
        &out,
        "<path d='M%.1f %.1fh%.0f' stroke='%s' stroke-width='%.3g'%s/>"
        "<text x='%.1f' y='%.1f'>%s</text>\n",
        x + 4, row, kSample, line.color, std::min(line.width, 3.0),
        line.dotted ? " stroke-dasharray='1.5,3' stroke-linecap='round'" : "",
        x + kSample + 8, row + 3.5, Escape(line.name));
  }
  return out + "</g>\n";
}

std::string Plot(const Axes& axes, const std::vector<Line>& lines) {
  const Frame frame(axes, lines);
  return frame.Furniture() + frame.Lines(lines);
}

}  // namespace elastrun::trainer::svg
