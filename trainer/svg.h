// Charts as SVG text, no plotting library: a plot area with a frame, round
// ticks, a light grid, tick labels, axis labels, a title, lines and a
// legend. The classifier's plots (plot.h) and the detector's
// (detect/plots.h) draw with it. Text widths are estimated (0.6 em per
// character of sans-serif), so layouts leave room by that estimate.
//
// Thread-safety: pure functions and immutable values.
#ifndef ELASTRUN_TRAINER_SVG_H_
#define ELASTRUN_TRAINER_SVG_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace elastrun::trainer::svg {

// `text` with & < > ' " escaped, for an element's text or an attribute.
std::string Escape(absl::string_view text);

// The estimated width in pixels of `text` at `font_size`.
double TextWidth(absl::string_view text, double font_size);

// `text` cut to at most `max_chars` characters, "..." marking a cut.
std::string Truncate(absl::string_view text, size_t max_chars);

// The opening <svg> element of a width x height picture on white, and its end.
std::string Begin(double width, double height);
std::string End();

// Colour `i` of matplotlib's tab10 cycle (tab20's order past 10 when
// `count` > 10, so up to 20 series keep distinct colours).
std::string PaletteColor(size_t i, size_t count = 10);

// Round values (1, 2, 2.5 or 5 times a power of ten apart) inside
// [lo, hi], about `target` of them; `whole` keeps the step >= 1.
std::vector<double> NiceTicks(double lo, double hi, int target = 5, bool whole = false);

// A tick's label: as many decimals as `step` needs.
std::string TickLabel(double value, double step);

struct Range {
  double lo = 0;
  double hi = 1;
};

// One series. Points that are not finite are left out.
struct Line {
  std::string name;  // the legend's text; empty: not in the legend
  std::string color = "#1f77b4";
  std::vector<std::pair<double, double>> points;
  double width = 2;
  bool dotted = false;
  double marker_radius = 0;  // > 0: a dot of this radius at each point
};

enum class LegendPlace {
  kNone,
  kInsideTopRight,  // a box in the plot area's top right corner
  kOutsideRight,    // a column to the right of the plot area
};

// Where a chart goes and how it is labelled.
struct Axes {
  std::string title;    // above the plot area, centred
  std::string x_label;  // below the tick labels
  std::string y_label;  // left of the tick labels, turned
  // The plot area in pixels; the labels go outside it (title ~22 px above,
  // ~40 px below for tick and axis labels, ~55 px left).
  double left = 60;
  double top = 40;
  double width = 300;
  double height = 200;
  // The ranges shown. Unset (lo == hi): the lines' extent with a 5% margin.
  Range x{0, 0};
  Range y{0, 0};
  bool whole_x = false;  // x ticks at whole numbers only (epochs)
  bool x_ticks = true;   // false: no numeric x ticks (a caller labels x itself)
  LegendPlace legend = LegendPlace::kInsideTopRight;
};

// Maps data to pixels inside an Axes' plot area and draws its furniture.
class Frame {
 public:
  // `axes` with unset ranges filled from `lines` (or 0..1 without points).
  Frame(const Axes& axes, const std::vector<Line>& lines);

  double X(double x) const;
  double Y(double y) const;
  const Axes& axes() const { return axes_; }

  // Grid, frame, ticks, tick labels, axis labels and title.
  std::string Furniture() const;
  // Each line as a <polyline> (one per line with >= 1 point; dots too
  // when marker_radius > 0), then the legend.
  std::string Lines(const std::vector<Line>& lines) const;

 private:
  Axes axes_;
};

// Frame(axes, lines): its furniture and its lines.
std::string Plot(const Axes& axes, const std::vector<Line>& lines);

}  // namespace elastrun::trainer::svg

#endif  // ELASTRUN_TRAINER_SVG_H_
