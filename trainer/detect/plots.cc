#include "trainer/detect/plots.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "trainer/metrics.h"
#include "trainer/svg.h"

namespace elastrun::trainer::detect {
namespace {

using Points = std::vector<std::pair<double, double>>;

// scipy.ndimage.gaussian_filter1d(y, sigma) with its defaults: a kernel of
// radius int(4 * sigma + 0.5), ends extended by mode "reflect" (d c b a |
// a b c d | d c b a).
std::vector<double> GaussianFilter1d(const std::vector<double>& y, double sigma) {
  const int n = static_cast<int>(y.size());
  const int radius = static_cast<int>(4 * sigma + 0.5);
  std::vector<double> w(2 * radius + 1);
  double sum = 0;
  for (int k = -radius; k <= radius; ++k) {
    w[k + radius] = std::exp(-0.5 * k * k / (sigma * sigma));
    sum += w[k + radius];
  }
  for (double& v : w) v /= sum;
  std::vector<double> out(n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int k = -radius; k <= radius; ++k) {
      int j = (i + k) % (2 * n);
      if (j < 0) j += 2 * n;
      if (j >= n) j = 2 * n - 1 - j;
      out[i] += w[k + radius] * y[j];
    }
  }
  return out;
}

// The finite (x, y) pairs.
Points FinitePoints(const std::vector<double>& x, const std::vector<double>& y) {
  Points p;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (std::isfinite(x[i]) && std::isfinite(y[i])) p.emplace_back(x[i], y[i]);
  }
  return p;
}

std::string Name(const std::vector<std::string>& names, size_t i) {
  return i < names.size() && !names[i].empty() ? names[i] : absl::StrCat(i);
}

// Matplotlib's "Blues", t in [0, 1], as #rrggbb.
std::string Blues(double t) {
  static const double kStops[][3] = {
      {247, 251, 255}, {198, 219, 239}, {107, 174, 214}, {33, 113, 181}, {8, 48, 107}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  int c[3];
  for (int k = 0; k < 3; ++k) {
    c[k] = static_cast<int>(
        std::lround(kStops[i][k] + f * (kStops[i + 1][k] - kStops[i][k])));
  }
  return absl::StrFormat("#%02x%02x%02x", c[0], c[1], c[2]);
}

// A 2-D histogram of `points` in `frame`'s ranges, `bins` x `bins` cells,
// each non-empty cell shaded by log(1 + count) / log(1 + most).
std::string Histogram2d(const svg::Frame& frame, const Points& points, int bins) {
  const svg::Axes& a = frame.axes();
  std::vector<int64_t> counts(static_cast<size_t>(bins) * bins, 0);
  int64_t most = 0;
  for (const auto& [x, y] : points) {
    const int i = static_cast<int>(std::floor((x - a.x.lo) / (a.x.hi - a.x.lo) * bins));
    const int j = static_cast<int>(std::floor((y - a.y.lo) / (a.y.hi - a.y.lo) * bins));
    if (i < 0 || j < 0 || i > bins || j > bins) continue;
    int64_t& c =
        counts[static_cast<size_t>(std::min(j, bins - 1)) * bins + std::min(i, bins - 1)];
    most = std::max(most, ++c);
  }
  std::string out = "<g shape-rendering='crispEdges'>";
  const double cw = a.width / bins, ch = a.height / bins;
  for (int j = 0; j < bins; ++j) {
    for (int i = 0; i < bins; ++i) {
      const int64_t c = counts[static_cast<size_t>(j) * bins + i];
      if (c == 0) continue;
      const double t = 0.15 + 0.85 * std::log1p(c) / std::log1p(most);
      absl::StrAppendFormat(
          &out, "<rect x='%.1f' y='%.1f' width='%.2f' height='%.2f' fill='%s'/>",
          a.left + i * cw, a.top + a.height - (j + 1) * ch, cw, ch, Blues(t));
    }
  }
  return out + "</g>\n";
}

// The axes of a `width` x `height` plot area at (left, top), no legend;
// ranges {0, 0} follow the data.
svg::Axes MakeAxes(std::string title, std::string x_label, std::string y_label,
                   double left, double top, double width, double height,
                   svg::Range x = {0, 0}, svg::Range y = {0, 0}) {
  svg::Axes axes;
  axes.title = std::move(title);
  axes.x_label = std::move(x_label);
  axes.y_label = std::move(y_label);
  axes.left = left;
  axes.top = top;
  axes.width = width;
  axes.height = height;
  axes.x = x;
  axes.y = y;
  axes.legend = svg::LegendPlace::kNone;
  return axes;
}

}  // namespace

absl::StatusOr<ResultsTable> ReadResultsCsv(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  ResultsTable table;
  table.columns = absl::StrSplit(kResultsHeader, ',');
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> fields = absl::StrSplit(line, ',');
    for (std::string& f : fields) absl::StripAsciiWhitespace(&f);
    if (number == 1) {
      if (fields != table.columns) {
        return absl::DataLossError(
            absl::StrCat(path, ":1: not the header of results.csv: '", line,
                         "'; expected '", kResultsHeader, "'"));
      }
      continue;
    }
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    std::vector<double> row(fields.size());
    bool ok = fields.size() == table.columns.size();
    for (size_t i = 0; ok && i < fields.size(); ++i)
      ok = absl::SimpleAtod(fields[i], &row[i]);
    if (!ok) {
      return absl::DataLossError(
          absl::StrCat(path, ":", number, ": expected ", table.columns.size(),
                       " comma-separated numbers (one per column of the "
                       "header), got '",
                       line, "'"));
    }
    table.rows.push_back(std::move(row));
  }
  if (number == 0) return absl::DataLossError(absl::StrCat(path, ":1: empty, no header"));
  return table;
}

std::string RenderResultsSvg(const ResultsTable& table) {
  // YOLOv5's panels: the columns 1, 2, 3, 4, 5, 8, 9, 10, 6, 7.
  constexpr size_t kPanels[] = {1, 2, 3, 4, 5, 8, 9, 10, 6, 7};
  constexpr double kW = 230, kH = 160, kLeft = 62, kGapX = 72, kTop = 62, kGapY = 100;
  constexpr const char* kResults = "#1f77b4";
  constexpr const char* kSmooth = "#ff7f0e";
  std::vector<double> epochs;
  for (const auto& row : table.rows) epochs.push_back(row.empty() ? NAN : row[0]);
  std::string out =
      svg::Begin(kLeft + 5 * kW + 4 * kGapX + 20, kTop + 2 * kH + kGapY + 45);
  // One legend for all panels, above them.
  absl::StrAppendFormat(
      &out,
      "<g font-size='11'><path d='M%.1f 22h22' stroke='%s' stroke-width='2'/>"
      "<circle cx='%.1f' cy='22' r='3' fill='%s'/><text x='%.1f' y='26'>results</text>"
      "<path d='M%.1f 22h22' stroke='%s' stroke-width='2' stroke-dasharray='1.5,3' "
      "stroke-linecap='round'/><text x='%.1f' y='26'>smooth (Gaussian, sigma "
      "3)</text></g>\n",
      kLeft, kResults, kLeft + 11, kResults, kLeft + 28, kLeft + 100, kSmooth,
      kLeft + 128);
  for (size_t p = 0; p < std::size(kPanels); ++p) {
    const size_t column = kPanels[p];
    std::vector<double> y;
    for (const auto& row : table.rows)
      y.push_back(column < row.size() ? row[column] : NAN);
    svg::Line results{"", kResults, FinitePoints(epochs, y)};
    results.marker_radius = 2.5;
    std::vector<double> finite_y;
    for (const auto& pt : results.points) finite_y.push_back(pt.second);
    svg::Line smooth{"", kSmooth, {}};
    smooth.dotted = true;
    // One point smooths to itself: no second dot over the first.
    const std::vector<double> smoothed =
        finite_y.size() >= 2 ? GaussianFilter1d(finite_y, 3) : std::vector<double>();
    for (size_t i = 0; i < smoothed.size(); ++i) {
      smooth.points.emplace_back(results.points[i].first, smoothed[i]);
    }
    svg::Axes axes =
        MakeAxes(column < table.columns.size() ? table.columns[column] : "", "epoch", "",
                 kLeft + static_cast<double>(p % 5) * (kW + kGapX),
                 kTop + static_cast<double>(p / 5) * (kH + kGapY), kW, kH);
    axes.whole_x = true;
    out += svg::Plot(axes, {results, smooth});
  }
  return out + svg::End();
}

absl::Status WriteResultsPlot(const std::string& results_csv,
                              const std::string& svg_path) {
  absl::StatusOr<ResultsTable> table = ReadResultsCsv(results_csv);
  if (!table.ok()) return table.status();
  return WriteSvg(svg_path, RenderResultsSvg(*table));
}

std::string RenderLabelsSvg(const std::vector<std::string>& names,
                            const std::vector<int64_t>& per_class,
                            const std::vector<std::array<float, 4>>& boxes) {
  constexpr double kW = 320, kH = 260, kLeft = 72, kGapX = 100, kTop = 40;
  constexpr size_t kMaxNameChars = 20;
  constexpr size_t kMaxShapes = 1000;
  constexpr int kBins = 50;
  const size_t nc = std::max(per_class.size(), names.size());

  // Bars: names under them, turned, while a slot holds a line of text;
  // else class numbers at round ticks.
  const double slot = kW / static_cast<double>(std::max<size_t>(nc, 1));
  const bool show_names = nc > 0 && slot >= 11;
  const double name_font = std::min(10.0, slot - 1);
  double names_height = 0;
  for (size_t i = 0; show_names && i < nc; ++i) {
    names_height =
        std::max(names_height,
                 svg::TextWidth(svg::Truncate(Name(names, i), kMaxNameChars), name_font));
  }
  const double row2_top = kTop + kH + std::max(names_height + 12, 40.0) + 36;
  std::string out = svg::Begin(kLeft + 2 * kW + kGapX + 30, row2_top + kH + 50);

  int64_t most = 0;
  for (int64_t c : per_class) most = std::max(most, c);
  svg::Axes bars = MakeAxes(absl::StrCat("instances per class (", nc, " classes)"), "",
                            "instances", kLeft, kTop, kW, kH,
                            {-0.5, static_cast<double>(std::max<size_t>(nc, 1)) - 0.5},
                            {0, most > 0 ? static_cast<double>(most) * 1.08 : 1});
  bars.x_ticks = false;
  const svg::Frame bar_frame(bars, {});
  out += bar_frame.Furniture();
  out += "<g>";
  const double bottom = kTop + kH;
  for (size_t i = 0; i < nc; ++i) {
    const double count = i < per_class.size() ? static_cast<double>(per_class[i]) : 0;
    const double x = bar_frame.X(static_cast<double>(i)), y = bar_frame.Y(count);
    absl::StrAppendFormat(
        &out, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s'/>",
        x - slot * 0.4, y, slot * 0.8, bottom - y, svg::PaletteColor(i, nc));
    if (slot >= 30) {
      absl::StrAppendFormat(&out,
                            "<text x='%.1f' y='%.1f' font-size='9' text-anchor='middle' "
                            "fill='#333'>%.0f</text>",
                            x, y - 3, count);
    }
    if (show_names) {
      const double ty = bottom + 6;
      absl::StrAppendFormat(&out,
                            "<text x='%.1f' y='%.1f' font-size='%.1f' text-anchor='end' "
                            "transform='rotate(-90 %.1f %.1f)'>%s</text>",
                            x + name_font * 0.35, ty, name_font, x + name_font * 0.35, ty,
                            svg::Escape(svg::Truncate(Name(names, i), kMaxNameChars)));
    }
  }
  out += "</g>\n";
  if (!show_names && nc > 0) {
    std::string ticks;
    const std::vector<double> xs =
        svg::NiceTicks(0, static_cast<double>(nc - 1), 6, true);
    for (double v : xs) {
      absl::StrAppendFormat(&ticks,
                            "<text x='%.1f' y='%.1f' text-anchor='middle'>%.0f</text>",
                            bar_frame.X(v), bottom + 15, v);
    }
    absl::StrAppendFormat(&out,
                          "<g font-size='10' fill='#333'>%s</g><text x='%.1f' y='%.1f' "
                          "font-size='11' text-anchor='middle'>class</text>\n",
                          ticks, kLeft + kW / 2, bottom + 32);
  }

  // The shapes of a sample of boxes, all centred: every k-th box.
  std::vector<std::array<float, 4>> finite;
  for (const auto& b : boxes) {
    if (std::all_of(b.begin(), b.end(), [](float v) { return std::isfinite(v); })) {
      finite.push_back(b);
    }
  }
  const size_t stride =
      std::max<size_t>(1, (finite.size() + kMaxShapes - 1) / kMaxShapes);
  // Square plot areas, so that shapes keep their aspect.
  const svg::Axes shapes = MakeAxes(
      absl::StrCat("box shapes, centred (",
                   finite.size() > kMaxShapes
                       ? absl::StrCat((finite.size() + stride - 1) / stride, " of ")
                       : "",
                   finite.size(), " boxes)"),
      "x - centre x", "y - centre y", kLeft + kW + kGapX, kTop, kH, kH, {-0.5, 0.5},
      {-0.5, 0.5});
  const svg::Frame shape_frame(shapes, {});
  out += shape_frame.Furniture();
  out += "<g fill='none' stroke='#1f77b4' stroke-opacity='0.2' stroke-width='1'>";
  for (size_t i = 0; i < finite.size(); i += stride) {
    const double w = std::clamp<double>(finite[i][2], 0, 1);
    const double h = std::clamp<double>(finite[i][3], 0, 1);
    absl::StrAppendFormat(&out, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f'/>",
                          shape_frame.X(-w / 2), shape_frame.Y(h / 2), w * kH, h * kH);
  }
  out += "</g>\n";

  // Where the boxes are and how large: 2-D histograms of all of them.
  Points centres, sizes;
  double largest = 0;
  for (const auto& b : finite) {
    centres.emplace_back(b[0], b[1]);
    sizes.emplace_back(b[2], b[3]);
    largest = std::max({largest, static_cast<double>(b[2]), static_cast<double>(b[3])});
  }
  const svg::Frame where_frame(
      MakeAxes(absl::StrCat("box centres (", finite.size(), " boxes)"), "x", "y", kLeft,
               row2_top, kH, kH, {0, 1}, {0, 1}),
      {});
  out += where_frame.Furniture() + Histogram2d(where_frame, centres, kBins);
  const double hi = largest > 0 ? std::min(1.0, largest * 1.05) : 1;
  const svg::Frame size_frame(
      MakeAxes(absl::StrCat("box sizes (", finite.size(), " boxes)"), "width", "height",
               kLeft + kW + kGapX, row2_top, kH, kH, {0, hi}, {0, hi}),
      {});
  out += size_frame.Furniture() + Histogram2d(size_frame, sizes, kBins);
  return out + svg::End();
}

std::string RenderPrCurveSvg(const std::vector<std::string>& names,
                             const std::vector<std::vector<double>>& pr_curves,
                             const std::vector<double>& ap50) {
  constexpr double kW = 480, kH = 360, kLeft = 70, kTop = 40;
  constexpr size_t kMaxNameChars = 24;
  const size_t nc = pr_curves.size();
  const bool per_class_legend = nc > 0 && nc < 21;  // YOLOv5's 0 < len(names) < 21
  std::vector<svg::Line> lines;
  size_t points = 0;
  for (const auto& py : pr_curves) points = std::max(points, py.size());
  std::vector<double> sum(points, 0.0), count(points, 0.0);
  for (size_t c = 0; c < nc; ++c) {
    const std::vector<double>& py = pr_curves[c];
    svg::Line line;
    line.width = 1;
    line.color = per_class_legend ? svg::PaletteColor(c, nc) : "#808080";
    if (per_class_legend) {
      line.name = absl::StrFormat("%s %.3f", svg::Truncate(Name(names, c), kMaxNameChars),
                                  c < ap50.size() ? ap50[c] : 0.0);
    }
    for (size_t i = 0; i < py.size(); ++i) {
      const double r = py.size() > 1 ? static_cast<double>(i) / (py.size() - 1) : 0;
      line.points.emplace_back(r, py[i]);
      if (std::isfinite(py[i])) {
        sum[i] += py[i];
        count[i] += 1;
      }
    }
    lines.push_back(std::move(line));
  }
  double map50 = 0;
  for (double ap : ap50) map50 += ap;
  if (!ap50.empty()) map50 /= static_cast<double>(ap50.size());
  svg::Line mean;
  mean.name = absl::StrFormat("all classes %.3f mAP@0.5", map50);
  mean.color = "#0000ff";
  mean.width = 3;
  for (size_t i = 0; i < sum.size(); ++i) {
    const double r = sum.size() > 1 ? static_cast<double>(i) / (sum.size() - 1) : 0;
    if (count[i] > 0) mean.points.emplace_back(r, sum[i] / count[i]);
  }
  lines.push_back(std::move(mean));

  double legend_width = 0;
  for (const svg::Line& line : lines) {
    legend_width = std::max(legend_width, svg::TextWidth(line.name, 10) + 40);
  }
  svg::Axes axes = MakeAxes("Precision-Recall Curve", "Recall", "Precision", kLeft, kTop,
                            kW, kH, {0, 1}, {0, 1});
  axes.legend = svg::LegendPlace::kOutsideRight;
  std::string out = svg::Begin(kLeft + kW + 10 + legend_width + 10, kTop + kH + 50);
  out += svg::Plot(axes, lines);
  return out + svg::End();
}

absl::Status WriteSvg(const std::string& path, const std::string& svg) {
  return WriteFileAtomically(path, svg);
}

}  // namespace elastrun::trainer::detect
