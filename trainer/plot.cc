#include "trainer/plot.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace elastrun::trainer {

absl::StatusOr<std::vector<EpochMetrics>> ReadMetricsCsv(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::vector<EpochMetrics> rows;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (number == 1 || line.empty()) continue;  // header
    std::vector<std::string> f = absl::StrSplit(line, ',');
    EpochMetrics m;
    double* fields[] = {&m.train_loss, &m.test_loss, &m.test_acc, &m.lr, &m.seconds,
                        &m.images_per_sec};
    bool ok = f.size() == 7 && absl::SimpleAtoi(f[0], &m.epoch);
    for (size_t i = 0; ok && i < 6; ++i) ok = absl::SimpleAtod(f[i + 1], fields[i]);
    if (!ok) {
      return absl::DataLossError(
          absl::StrCat(path, ":", number, ": not a metrics row: '", line, "'"));
    }
    rows.push_back(m);
  }
  return rows;
}

namespace {

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;
};

// One panel at (x0, y0) of size w x h.
std::string Panel(const std::string& title, const std::vector<Series>& series, double x0,
                  double y0, double w, double h) {
  double xmin = 1e300, xmax = -1e300, ymin = 1e300, ymax = -1e300;
  for (const Series& s : series) {
    for (const auto& [x, y] : s.points) {
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymin = std::min(ymin, y);
      ymax = std::max(ymax, y);
    }
  }
  std::string out = absl::StrFormat(
      "<g><rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#999'/>"
      "<text x='%.1f' y='%.1f' font-size='13'>%s</text>\n",
      x0, y0, w, h, x0, y0 - 6, title);
  if (xmin > xmax) return out + "</g>\n";
  if (xmax == xmin) xmax = xmin + 1;
  if (ymax == ymin) ymax = ymin + (ymin == 0 ? 1 : std::abs(ymin) * 0.1);
  auto px = [&](double x) { return x0 + (x - xmin) / (xmax - xmin) * w; };
  auto py = [&](double y) { return y0 + h - (y - ymin) / (ymax - ymin) * h; };
  absl::StrAppendFormat(&out,
                        "<text x='%.1f' y='%.1f' font-size='10'>%.4g</text>"
                        "<text x='%.1f' y='%.1f' font-size='10'>%.4g</text>"
                        "<text x='%.1f' y='%.1f' font-size='10'>epoch %g</text>"
                        "<text x='%.1f' y='%.1f' font-size='10' text-anchor='end'>%g</text>\n",
                        x0 + 2, y0 + 10, ymax, x0 + 2, y0 + h - 2, ymin, x0, y0 + h + 12,
                        xmin, x0 + w, y0 + h + 12, xmax);
  double legend_y = y0 + 14;
  for (const Series& s : series) {
    std::string pts;
    for (const auto& [x, y] : s.points) absl::StrAppendFormat(&pts, "%.1f,%.1f ", px(x), py(y));
    absl::StrAppendFormat(&out,
                          "<polyline fill='none' stroke='%s' stroke-width='2' points='%s'/>"
                          "<text x='%.1f' y='%.1f' font-size='10' fill='%s' "
                          "text-anchor='end'>%s</text>\n",
                          s.color, pts, x0 + w - 4, legend_y, s.color, s.name);
    legend_y += 12;
  }
  return out + "</g>\n";
}

}  // namespace

std::string RenderSvg(const std::vector<EpochMetrics>& rows) {
  Series train{"train loss", "#1f77b4", {}}, test{"test loss", "#ff7f0e", {}},
      acc{"test accuracy", "#2ca02c", {}}, lr{"lr", "#9467bd", {}};
  for (const EpochMetrics& m : rows) {
    const double e = static_cast<double>(m.epoch);
    train.points.emplace_back(e, m.train_loss);
    test.points.emplace_back(e, m.test_loss);
    acc.points.emplace_back(e, m.test_acc);
    lr.points.emplace_back(e, m.lr);
  }
  constexpr double kW = 300, kH = 200, kPad = 40;
  std::string out = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
      "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
      3 * kW + 4 * kPad, kH + 2 * kPad);
  out += Panel("loss", {train, test}, kPad, kPad, kW, kH);
  out += Panel("test accuracy", {acc}, 2 * kPad + kW, kPad, kW, kH);
  out += Panel("learning rate (end of epoch)", {lr}, 3 * kPad + 2 * kW, kPad, kW, kH);
  return out + "</svg>\n";
}

absl::Status WritePlots(const std::string& metrics_csv, const std::string& svg_path) {
  absl::StatusOr<std::vector<EpochMetrics>> rows = ReadMetricsCsv(metrics_csv);
  if (!rows.ok()) return rows.status();
  return WriteFileAtomically(svg_path, RenderSvg(*rows));
}

}  // namespace elastrun::trainer
