#include "evolve/evolve_plots.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainer/metrics.h"
#include "trainer/svg.h"

namespace elastrun::evolve {
namespace {

namespace svg = ::elastrun::trainer::svg;

constexpr int kBins = 20;  // YOLOv5's hist2d(v, f, 20)
constexpr size_t kColumns = 5;
// kPanelH >= 160: svg::Frame then asks for height / 40 = 4 fitness ticks,
// and a step so chosen always leaves two or more in range (with 3, a lone
// tick can be labelled without its decimals).
constexpr double kPanelW = 190, kPanelH = 160, kLeft = 66, kGapX = 58, kTop = 76,
                 kGapY = 62, kTitleFont = 13;
constexpr const char* kFailedColor = "#9a9a9a";

// Matplotlib's viridis at t in [0, 1] (nine of its stops), as #rrggbb.
std::string Viridis(double t) {
  static const double kStops[][3] = {{68, 1, 84},    {71, 45, 123},  {59, 82, 139},
                                     {44, 114, 142}, {33, 145, 140}, {40, 174, 128},
                                     {94, 201, 98},  {173, 220, 48}, {253, 231, 37}};
  constexpr int kLast = static_cast<int>(std::size(kStops)) - 1;
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * kLast;
  const int i = std::min(kLast - 1, static_cast<int>(t));
  const double f = t - i;
  int c[3];
  for (int k = 0; k < 3; ++k) {
    c[k] = static_cast<int>(std::lround(kStops[i][k] + f * (kStops[i + 1][k] - kStops[i][k])));
  }
  return absl::StrFormat("#%02x%02x%02x", c[0], c[1], c[2]);
}

// Where `v` falls among kBins equal cells over [lo, hi]; hi in the last.
int Bin(double v, double lo, double hi) {
  if (!(hi > lo)) return 0;
  return std::clamp(static_cast<int>(std::floor((v - lo) / (hi - lo) * kBins)), 0, kBins - 1);
}

// For each point, how many points share its cell of a kBins x kBins grid
// over the points' extent.
std::vector<int> CellCounts(const std::vector<std::pair<double, double>>& points) {
  double x_lo = 1e300, x_hi = -1e300, y_lo = 1e300, y_hi = -1e300;
  for (const auto& [x, y] : points) {
    x_lo = std::min(x_lo, x);
    x_hi = std::max(x_hi, x);
    y_lo = std::min(y_lo, y);
    y_hi = std::max(y_hi, y);
  }
  std::vector<int> grid(kBins * kBins, 0), cell(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    cell[i] = Bin(points[i].second, y_lo, y_hi) * kBins + Bin(points[i].first, x_lo, x_hi);
    ++grid[cell[i]];
  }
  std::vector<int> counts(points.size());
  for (size_t i = 0; i < points.size(); ++i) counts[i] = grid[cell[i]];
  return counts;
}

// The colour of a cell holding `count` of at most `most`: log-scaled, 1 at
// the dark end.
std::string DensityColor(int count, int most) {
  return Viridis(most > 1 ? std::log(count) / std::log(most) : 0.0);
}

// "name = value", the name's start cut ("...weight_decay") so that the
// title fits a panel: config keys differ most at their end.
std::string Title(const std::string& name, const std::string& value) {
  const std::string tail = value.empty() ? "" : absl::StrCat(" = ", value);
  const size_t fits = static_cast<size_t>(kPanelW / svg::TextWidth("x", kTitleFont));
  const size_t room = std::max<size_t>(fits > tail.size() ? fits - tail.size() : 0, 6);
  if (name.size() <= room) return name + tail;
  return absl::StrCat("...", name.substr(name.size() - (room - 3)), tail);
}

// The lines above the panels: what the colours and marks mean; *right is
// where the last of it ends.
std::string Legend(int individuals, int failed, double* right) {
  std::string out = "<g font-size='11' fill='#333'>";
  double x = kLeft;
  absl::StrAppendFormat(&out, "<text x='%.1f' y='22' font-size='13'>%d individual%s", x,
                        individuals, individuals == 1 ? "" : "s");
  if (failed > 0) absl::StrAppendFormat(&out, ", %d failed", failed);
  out += ": fitness against each hyperparameter's value</text>\n";
  // The ramp, with the counts at its ends.
  const double ramp_w = 90, y = 38;
  out += "<defs><linearGradient id='density'>";
  for (int k = 0; k <= 8; ++k) {
    absl::StrAppendFormat(&out, "<stop offset='%.3f' stop-color='%s'/>", k / 8.0,
                          Viridis(k / 8.0));
  }
  out += "</linearGradient></defs>";
  absl::StrAppendFormat(&out,
                        "<text x='%.1f' y='%.1f'>colour: individuals in the point's cell of "
                        "a %dx%d grid, log scale</text>",
                        x, y + 9, kBins, kBins);
  x += svg::TextWidth("colour: individuals in the point's cell of a 20x20 grid, log scale",
                      11) +
       12;
  absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f' text-anchor='end'>1</text>", x + 8,
                        y + 9);
  x += 12;
  absl::StrAppendFormat(&out,
                        "<rect x='%.1f' y='%.1f' width='%.1f' height='10' "
                        "fill='url(#density)'/>",
                        x, y, ramp_w);
  x += ramp_w + 4;
  absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f'>the panel's most</text>", x,
                        y + 9);
  x += svg::TextWidth("the panel's most", 11) + 20;
  absl::StrAppendFormat(&out,
                        "<path d='M%.1f %.1fh12M%.1f %.1fv12' stroke='black' "
                        "stroke-width='1.5'/><text x='%.1f' y='%.1f'>best</text>",
                        x, y + 5, x + 6, y - 1, x + 18, y + 9);
  if (failed > 0) {
    x += 60;
    absl::StrAppendFormat(&out,
                          "<path d='M%.1f %.1fv10' stroke='%s' stroke-width='2'/>"
                          "<text x='%.1f' y='%.1f'>failed, at its value on the "
                          "bottom edge</text>",
                          x, y, kFailedColor, x + 8, y + 9);
    x += 8 + svg::TextWidth("failed, at its value on the bottom edge", 11);
  } else {
    x += 18 + svg::TextWidth("best", 11);
  }
  *right = x;
  return out + "</g>\n";
}

}  // namespace

std::string RenderEvolveSvg(const std::vector<std::string>& names,
                            const std::vector<EvolvePlotRow>& rows) {
  if (names.empty()) {
    return absl::StrCat(svg::Begin(420, 60),
                        "<text x='20' y='35' font-size='13'>no hyperparameter columns "
                        "to plot</text>\n",
                        svg::End());
  }
  // The best: the first ok row of the highest finite fitness.
  int best = -1, failed = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].failed) {
      ++failed;
    } else if (std::isfinite(rows[r].fitness) &&
               (best < 0 || rows[r].fitness > rows[best].fitness)) {
      best = static_cast<int>(r);
    }
  }
  const size_t columns = std::min(kColumns, names.size());
  const size_t panel_rows = (names.size() + kColumns - 1) / kColumns;
  std::string panels;
  for (size_t p = 0; p < names.size(); ++p) {
    // The ok points, and the failed values; `extent` sets the ranges: the
    // ok fitness, every value.
    std::vector<std::pair<double, double>> ok;
    std::vector<double> failed_values;
    svg::Line extent;
    for (const EvolvePlotRow& row : rows) {
      const double v = p < row.values.size() ? row.values[p] : NAN;
      if (!std::isfinite(v)) continue;
      if (row.failed) {
        failed_values.push_back(v);
      } else if (std::isfinite(row.fitness)) {
        ok.emplace_back(v, row.fitness);
      }
    }
    extent.points = ok;
    // Room above the best for its +, below the lowest for the failed ticks.
    double f_lo = 1e300, f_hi = -1e300;
    for (const auto& pt : ok) {
      f_lo = std::min(f_lo, pt.second);
      f_hi = std::max(f_hi, pt.second);
    }
    const svg::Range fitness_range =
        f_hi > f_lo ? svg::Range{f_lo - 0.1 * (f_hi - f_lo), f_hi + 0.12 * (f_hi - f_lo)}
                    : svg::Range{0, 0};
    // A failed value widens x only: it stands at an ok fitness (any).
    const double some_fitness = ok.empty() ? 0.0 : ok.front().second;
    for (double v : failed_values) extent.points.emplace_back(v, some_fitness);

    std::string value;
    if (best >= 0 && p < rows[best].values.size() && std::isfinite(rows[best].values[p])) {
      value = absl::StrFormat("%.3g", rows[best].values[p]);
    }
    svg::Axes axes;
    axes.title = Title(names[p], value);
    axes.y_label = p % kColumns == 0 ? "fitness" : "";
    axes.left = kLeft + static_cast<double>(p % kColumns) * (kPanelW + kGapX);
    axes.top = kTop + static_cast<double>(p / kColumns) * (kPanelH + kGapY);
    axes.width = kPanelW;
    axes.height = kPanelH;
    axes.legend = svg::LegendPlace::kNone;
    axes.y = fitness_range;
    const svg::Frame frame(axes, {extent});
    panels += frame.Furniture();

    // Points, sparse cells first so that dense ones stay on top.
    const std::vector<int> counts = CellCounts(ok);
    std::vector<size_t> order(ok.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return counts[a] < counts[b]; });
    const int most = counts.empty() ? 1 : *std::max_element(counts.begin(), counts.end());
    panels += "<g fill-opacity='0.8'>";
    for (size_t i : order) {
      absl::StrAppendFormat(&panels, "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>",
                            frame.X(ok[i].first), frame.Y(ok[i].second),
                            DensityColor(counts[i], most));
    }
    panels += "</g>\n";
    if (!failed_values.empty()) {
      std::string d;
      for (double v : failed_values) {
        absl::StrAppendFormat(&d, "M%.1f %.1fv-7", frame.X(v), axes.top + axes.height);
      }
      absl::StrAppendFormat(&panels, "<path d='%s' stroke='%s' stroke-width='1.5'/>\n", d,
                            kFailedColor);
    }
    if (!value.empty()) {
      const double x = frame.X(rows[best].values[p]), y = frame.Y(rows[best].fitness);
      absl::StrAppendFormat(&panels,
                            "<path d='M%.1f %.1fh14M%.1f %.1fv14' stroke='black' "
                            "stroke-width='1.5'/>\n",
                            x - 7, y, x, y - 7);
    }
  }
  const double width =
      kLeft + static_cast<double>(columns) * kPanelW + (columns - 1) * kGapX + 20;
  const double height =
      kTop + static_cast<double>(panel_rows) * kPanelH + (panel_rows - 1) * kGapY + 30;
  double legend_right = 0;
  const std::string legend = Legend(static_cast<int>(rows.size()), failed, &legend_right);
  return absl::StrCat(svg::Begin(std::max(width, legend_right + 20), height), legend, panels,
                      svg::End());
}

namespace {

// The fields of one CSV line: separated by commas, each possibly
// double-quoted, "" standing for a quote inside quotes. False when a quote
// is left open.
bool SplitFields(absl::string_view line, std::vector<std::string>* fields) {
  fields->assign(1, "");
  bool in_quotes = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '"' && in_quotes && i + 1 < line.size() && line[i + 1] == '"') {
      fields->back().push_back('"');
      ++i;
    } else if (c == '"') {
      in_quotes = !in_quotes;
    } else if (c == ',' && !in_quotes) {
      fields->emplace_back();
    } else {
      fields->back().push_back(c);
    }
  }
  for (std::string& f : *fields) f = std::string(absl::StripAsciiWhitespace(f));
  return !in_quotes;
}

bool IsMetric(absl::string_view name) {
  return absl::StartsWith(name, "metrics/") || absl::StartsWith(name, "val/") ||
         absl::StartsWith(name, "train/") || name == "test_acc" || name == "test_loss" ||
         name == "train_loss";
}

}  // namespace

absl::StatusOr<EvolvePlotTable> ReadEvolvePlotCsv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  const bool cut_short = !lines.back().empty();  // no newline after the last line
  if (!cut_short) lines.pop_back();
  auto error = [&](size_t n, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", n + 1, ": ", what));
  };

  std::vector<std::string> header;
  if (lines.empty() || !SplitFields(absl::StripSuffix(lines[0], "\r"), &header)) {
    return error(0, "expected a header line of column names");
  }
  const auto fitness = std::find(header.begin(), header.end(), "fitness");
  if (fitness == header.end()) {
    return error(0, "no column named fitness: expected evolve.csv's header "
                    "(generation,index,status,fitness,<metrics>,<hyperparameters>,reason)");
  }
  const auto status_it = std::find(header.begin(), header.end(), "status");
  const int status = status_it == header.end() ? -1 : static_cast<int>(status_it - header.begin());
  const size_t fitness_col = static_cast<size_t>(fitness - header.begin());
  EvolvePlotTable table;
  std::vector<size_t> cols;
  for (size_t c = fitness_col + 1; c < header.size(); ++c) {
    if (IsMetric(header[c]) || header[c] == "reason") continue;
    cols.push_back(c);
    table.names.push_back(header[c]);
  }
  if (cols.empty()) {
    return error(0, "no hyperparameter columns after fitness (every column there is a "
                    "metric or reason)");
  }

  std::vector<std::string> f;
  for (size_t n = 1; n < lines.size(); ++n) {
    const absl::string_view line = absl::StripSuffix(lines[n], "\r");
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const bool last_cut = cut_short && n + 1 == lines.size();
    absl::Status bad;
    EvolvePlotRow row;
    if (!SplitFields(line, &f) || f.size() != header.size()) {
      bad = error(n, absl::StrCat(f.size(), " fields, the header has ", header.size(),
                                  " (is a quote left open?)"));
    } else {
      row.failed = status >= 0 && f[status] != "ok" && f[status] != "done" &&
                   f[status] != "pruned";
      if (!row.failed && !absl::SimpleAtod(f[fitness_col], &row.fitness)) {
        bad = error(n, absl::StrCat("fitness '", f[fitness_col],
                                    "' is not a number (an ok row needs one)"));
      }
      for (size_t i = 0; bad.ok() && i < cols.size(); ++i) {
        double v = 0.0;
        if (!absl::SimpleAtod(f[cols[i]], &v)) {
          bad = error(n, absl::StrCat(table.names[i], ": '", f[cols[i]],
                                      "' is not a number"));
        }
        row.values.push_back(v);
      }
    }
    if (!bad.ok()) {
      if (last_cut) break;
      return bad;
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

absl::Status WriteEvolvePlot(const std::string& evolve_csv, const std::string& svg_path) {
  absl::StatusOr<EvolvePlotTable> table = ReadEvolvePlotCsv(evolve_csv);
  if (!table.ok()) return table.status();
  return trainer::WriteFileAtomically(svg_path, RenderEvolveSvg(table->names, table->rows));
}

}  // namespace elastrun::evolve
