#include "trainer/plot.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "trainer/svg.h"

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
    double* fields[] = {&m.train_loss, &m.test_loss, &m.test_acc,
                        &m.lr,         &m.seconds,   &m.images_per_sec};
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

std::string RenderSvg(const std::vector<EpochMetrics>& rows) {
  svg::Line train{"train loss", "#1f77b4", {}}, test{"test loss", "#ff7f0e", {}},
      acc{"test accuracy", "#2ca02c", {}}, lr{"lr", "#9467bd", {}};
  for (const EpochMetrics& m : rows) {
    const double e = static_cast<double>(m.epoch);
    train.points.emplace_back(e, m.train_loss);
    test.points.emplace_back(e, m.test_loss);
    acc.points.emplace_back(e, m.test_acc);
    lr.points.emplace_back(e, m.lr);
  }
  constexpr double kW = 300, kH = 200, kLeft = 70, kGap = 90, kTop = 40;
  svg::Axes axes;
  axes.top = kTop;
  axes.width = kW;
  axes.height = kH;
  axes.x_label = "epoch";
  axes.whole_x = true;
  std::string out = svg::Begin(kLeft + 3 * kW + 2 * kGap + 20, kTop + kH + 50);
  const std::pair<const char*, std::vector<svg::Line>> panels[] = {
      {"loss", {train, test}},
      {"test accuracy", {acc}},
      {"learning rate (end of epoch)", {lr}}};
  for (size_t i = 0; i < 3; ++i) {
    axes.title = panels[i].first;
    axes.left = kLeft + static_cast<double>(i) * (kW + kGap);
    axes.legend = i == 0 ? svg::LegendPlace::kInsideTopRight : svg::LegendPlace::kNone;
    out += svg::Plot(axes, panels[i].second);
  }
  return out + svg::End();
}

absl::Status WritePlots(const std::string& metrics_csv, const std::string& svg_path) {
  absl::StatusOr<std::vector<EpochMetrics>> rows = ReadMetricsCsv(metrics_csv);
  if (!rows.ok()) return rows.status();
  return WriteFileAtomically(svg_path, RenderSvg(*rows));
}

}  // namespace elastrun::trainer
