// The detector's plots: each SVG parses as XML (python3's
// xml.etree.ElementTree), holds its titles and legend and one polyline per
// series; results.csv's errors name file:line.
#include "trainer/detect/plots.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/test_files.h"

namespace elastrun::trainer::detect {
namespace {

using ::elastrun::trainer::testing::RunCommand;
using ::elastrun::trainer::testing::TestDir;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

using Parsed = ::elastrun::trainer::testing::ParsedSvg;

// Counts the SVG's polylines (see ParseSvg in trainer/test_files.h).
std::optional<Parsed> ParseSvg(const std::string& dir, const std::string& svg) {
  return ::elastrun::trainer::testing::ParseSvg(dir, svg, "polyline");
}

// A results.csv of `epochs` epochs whose losses fall and metrics rise, noisily.
std::string ResultsCsv(int epochs) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 0.01);
  std::string csv = absl::StrCat(kResultsHeader, "\n");
  for (int e = 0; e < epochs; ++e) {
    const double t = 1 - std::exp(-e / 20.0);
    std::vector<double> row = {static_cast<double>(e),
                               0.08 - 0.04 * t + noise(rng) * 0.2,
                               0.05 - 0.02 * t + noise(rng) * 0.2,
                               0.03 - 0.025 * t + noise(rng) * 0.2,
                               0.2 + 0.7 * t + noise(rng),
                               0.1 + 0.75 * t + noise(rng),
                               0.05 + 0.8 * t + noise(rng),
                               0.02 + 0.55 * t + noise(rng),
                               0.06 - 0.025 * t + noise(rng) * 0.2,
                               0.04 - 0.01 * t + noise(rng) * 0.2,
                               0.02 - 0.015 * t + noise(rng) * 0.2,
                               0.01 * (1 - e / 100.0),
                               0.01 * (1 - e / 100.0),
                               0.01 * (1 - e / 100.0),
                               30 + noise(rng),
                               1000 + noise(rng)};
    absl::StrAppend(&csv, absl::StrJoin(row, ","), "\n");
  }
  return csv;
}

const char* const kPanelTitles[] = {
    "train/box_loss",  "train/obj_loss",      "train/cls_loss", "metrics/precision",
    "metrics/recall",  "val/box_loss",        "val/obj_loss",   "val/cls_loss",
    "metrics/mAP_0.5", "metrics/mAP_0.5:0.95"};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ResultsPlotTest, TenPanelsWithResultsAndSmoothLines) {
  const std::string dir = TestDir();
  std::ofstream(dir + "/results.csv") << ResultsCsv(100);
  ASSERT_TRUE(WriteResultsPlot(dir + "/results.csv", dir + "/results.svg").ok());
  const std::string svg = ReadFile(dir + "/results.svg");
  const std::optional<Parsed> parsed = ParseSvg(dir, svg);
  if (!parsed) GTEST_SKIP() << "python3 is not available";
  EXPECT_EQ(parsed->count, 20);  // results and smooth in each of 10 panels
  for (const char* title : kPanelTitles) EXPECT_THAT(parsed->texts, Contains(title));
  EXPECT_THAT(parsed->texts, Contains("results"));
  EXPECT_THAT(parsed->texts, Contains("epoch"));
  EXPECT_THAT(parsed->texts, Contains(HasSubstr("smooth")));
}

TEST(ResultsPlotTest, OneEpochRendersDots) {
  const std::string dir = TestDir();
  std::ofstream(dir + "/results.csv") << ResultsCsv(1);
  ASSERT_TRUE(WriteResultsPlot(dir + "/results.csv", dir + "/results.svg").ok());
  const std::string svg = ReadFile(dir + "/results.svg");
  EXPECT_THAT(svg, HasSubstr("<circle"));
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  const std::optional<Parsed> parsed = ParseSvg(dir, svg);
  if (!parsed) GTEST_SKIP() << "python3 is not available";
  EXPECT_EQ(parsed->count, 10);  // the results; one point has no smooth line
}

TEST(ResultsPlotTest, HeaderOnlyRendersEmptyPanels) {
  const std::string dir = TestDir();
  std::ofstream(dir + "/results.csv") << kResultsHeader << "\n";
  absl::StatusOr<ResultsTable> table = ReadResultsCsv(dir + "/results.csv");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_TRUE(table->rows.empty());
  const std::string svg = RenderResultsSvg(*table);
  EXPECT_EQ(svg.find("polyline"), std::string::npos);
  EXPECT_THAT(svg, HasSubstr("metrics/mAP_0.5:0.95"));
}

TEST(ResultsPlotTest, ErrorsNameFileAndLine) {
  const std::string dir = TestDir();
  std::string csv = ResultsCsv(3);
  std::ofstream(dir + "/short.csv") << csv << "3,0.1,0.2\n";
  absl::Status s = WriteResultsPlot(dir + "/short.csv", dir + "/out.svg");
  EXPECT_THAT(std::string(s.message()), HasSubstr("short.csv:5:"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("expected 16"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.svg"));

  std::vector<std::string> lines = absl::StrSplit(csv, '\n');
  lines[2].replace(lines[2].find(','), 1, ",x");
  std::ofstream(dir + "/word.csv") << absl::StrJoin(lines, "\n");
  EXPECT_THAT(std::string(ReadResultsCsv(dir + "/word.csv").status().message()),
              HasSubstr("word.csv:3:"));

  std::ofstream(dir + "/header.csv") << "epoch,loss\n1,2\n";
  s = ReadResultsCsv(dir + "/header.csv").status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("header.csv:1:"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("train/box_loss"));

  std::ofstream(dir + "/empty.csv");
  EXPECT_THAT(std::string(ReadResultsCsv(dir + "/empty.csv").status().message()),
              HasSubstr("empty.csv:1:"));
  EXPECT_TRUE(absl::IsNotFound(ReadResultsCsv(dir + "/missing.csv").status()));
}

TEST(ResultsPlotTest, PaddedHeaderAndNanValuesPass) {
  const std::string dir = TestDir();
  std::string header = kResultsHeader;
  std::string padded;
  for (absl::string_view name : absl::StrSplit(header, ',')) {
    absl::StrAppend(&padded, padded.empty() ? "" : ",", "  ", name);
  }
  std::string csv = ResultsCsv(4);
  csv.replace(0, header.size(), padded);
  csv += "4,nan,nan,nan,nan,nan,nan,nan,nan,nan,nan,nan,nan,nan,nan,nan\n";
  std::ofstream(dir + "/results.csv") << csv;
  absl::StatusOr<ResultsTable> table = ReadResultsCsv(dir + "/results.csv");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->rows.size(), 5u);
  const std::string svg = RenderResultsSvg(*table);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(LabelsPlotTest, BarsNamesAndHistograms) {
  const std::vector<std::string> names = {
      "T-shirt/top", "Trouser", "Pullover", "Dress",      "Coat",
      "Sandal",      "Shirt",   "Sneaker",  "Bag & <co>", "Ankle boot"};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<int64_t> per_class(names.size(), 0);
  std::vector<std::array<float, 4>> boxes;
  for (int i = 0; i < 12000; ++i) {
    ++per_class[static_cast<size_t>(u(rng) * u(rng) * 10)];
    const float w = 0.05f + 0.2f * u(rng), h = w * (0.7f + 0.6f * u(rng));
    boxes.push_back({w / 2 + (1 - w) * u(rng), h / 2 + (1 - h) * u(rng), w, h});
  }
  const std::string dir = TestDir();
  const std::string svg = RenderLabelsSvg(names, per_class, boxes);
  ASSERT_TRUE(WriteSvg(dir + "/labels.svg", svg).ok());
  // Every box counts in the histograms; at most 1000 are drawn as shapes.
  EXPECT_THAT(svg, HasSubstr("(1000 of 12000 boxes)"));
  const std::optional<Parsed> parsed = ParseSvg(dir, svg);
  if (!parsed) GTEST_SKIP() << "python3 is not available";
  for (const std::string& name : names) EXPECT_THAT(parsed->texts, Contains(name));
  EXPECT_THAT(parsed->texts, Contains("instances per class (10 classes)"));
  EXPECT_THAT(parsed->texts, Contains("box centres (12000 boxes)"));
  EXPECT_THAT(parsed->texts, Contains("box sizes (12000 boxes)"));
}

TEST(LabelsPlotTest, ManyClassesAndNoBoxes) {
  const std::string dir = TestDir();
  std::vector<int64_t> per_class(80, 5);
  const std::string svg = RenderLabelsSvg({"person"}, per_class, {});
  const std::optional<Parsed> parsed = ParseSvg(dir, svg);
  if (!parsed) GTEST_SKIP() << "python3 is not available";
  // 80 bars leave no room for names: class numbers label the axis.
  EXPECT_THAT(parsed->texts, Not(Contains("person")));
  EXPECT_THAT(parsed->texts, Contains("class"));
  EXPECT_THAT(parsed->texts, Contains("box centres (0 boxes)"));
}

// Class c's precision envelope at the 1000 recalls of CurveGrid().
std::vector<double> PrCurve(double quality) {
  std::vector<double> p(1000);
  for (size_t i = 0; i < p.size(); ++i) {
    const double r = static_cast<double>(i) / 999;
    p[i] = std::floor(20 * std::max(0.0, 1 - std::pow(r, 1 / (1 - quality)))) / 20;
  }
  return p;
}

TEST(PrCurvePlotTest, OneLinePerClassAndTheMean) {
  const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover"};
  const std::string dir = TestDir();
  const std::string svg = RenderPrCurveSvg(
      names, {PrCurve(0.8), PrCurve(0.9), PrCurve(0.5)}, {0.8, 0.9, 0.6});
  ASSERT_TRUE(WriteSvg(dir + "/PR_curve.svg", svg).ok());
  // The envelope's flat runs are drawn by their ends, not 1000 points each.
  EXPECT_LT(svg.size(), 20000u);
  const std::optional<Parsed> parsed = ParseSvg(dir, svg);
  if (!parsed) GTEST_SKIP() << "python3 is not available";
  EXPECT_EQ(parsed->count, 4);
  EXPECT_THAT(parsed->texts, Contains("T-shirt/top 0.800"));
  EXPECT_THAT(parsed->texts, Contains("Pullover 0.600"));
  EXPECT_THAT(parsed->texts, Contains("all classes 0.767 mAP@0.5"));
  EXPECT_THAT(parsed->texts, Contains("Precision-Recall Curve"));
  EXPECT_THAT(parsed->texts, Contains("Recall"));
  EXPECT_THAT(parsed->texts, Contains("Precision"));
}

TEST(PrCurvePlotTest, ManyClassesHaveNoPerClassLegend) {
  const std::string dir = TestDir();
  std::vector<std::vector<double>> curves(30, PrCurve(0.7));
  const std::string svg = RenderPrCurveSvg({}, curves, std::vector<double>(30, 0.5));
  const std::optional<Parsed> parsed = ParseSvg(dir, svg);
  if (!parsed) GTEST_SKIP() << "python3 is not available";
  EXPECT_EQ(parsed->count, 31);
  EXPECT_THAT(parsed->texts, Contains("all classes 0.500 mAP@0.5"));
  EXPECT_THAT(parsed->texts, Not(Contains(HasSubstr("0 0.500"))));
}

TEST(PrCurvePlotTest, NoClassesStillRenders) {
  const std::string dir = TestDir();
  const std::string svg = RenderPrCurveSvg({}, {}, {});
  const std::optional<Parsed> parsed = ParseSvg(dir, svg);
  if (!parsed) GTEST_SKIP() << "python3 is not available";
  EXPECT_EQ(parsed->count, 0);
  EXPECT_THAT(parsed->texts, Contains("Precision-Recall Curve"));
}

TEST(WriteSvgTest, ErrorNamesThePath) {
  EXPECT_THAT(std::string(WriteSvg("/nonexistent/x.svg", "<svg/>").message()),
              HasSubstr("/nonexistent/x.svg"));
}

}  // namespace
}  // namespace elastrun::trainer::detect
