// The evolve plot: the SVG parses as XML (python3's xml.etree.ElementTree),
// has a panel per hyperparameter titled with its name and the best's value,
// draws 0 and 1 rows; evolve.csv's columns are found by the header and its
// errors name file:line.
#include "evolve/evolve_plots.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/test_files.h"

namespace elastrun::evolve {
namespace {

using ::elastrun::trainer::testing::RunCommand;
using ::elastrun::trainer::testing::TestDir;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Parsed = ::elastrun::trainer::testing::ParsedSvg;

// Counts the SVG's circles (see ParseSvg in trainer/test_files.h).
std::optional<Parsed> ParseSvg(const std::string& dir, const std::string& svg) {
  return ::elastrun::trainer::testing::ParseSvg(dir, svg, "circle");
}

std::string WriteCsv(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/evolve.csv";
  std::ofstream(path) << text;
  return path;
}

// The layout evolve_io.h writes: metrics, genes, then a quoted reason.
constexpr char kCsv[] =
    "generation,index,status,fitness,metrics/mAP_0.5,metrics/mAP_0.5:0.95,lr0,momentum,"
    "hsv_h,reason\n"
    "0,0,done,0.5,0.6,0.49,0.01,0.937,0.015,\n"
    "0,1,done,0.7,0.8,0.69,0.02,0.9,0.02,\n"
    "0,2,failed,0,,,0.05,0.8,0.03,\"exit 1, rank 0: out of memory\"\n"
    "1,0,done,0.6,0.7,0.59,0.015,0.95,0.01,\n";

TEST(EvolvePlotsTest, ReadsHyperparametersAfterFitnessSkippingMetrics) {
  const std::string dir = TestDir();
  absl::StatusOr<EvolvePlotTable> table = ReadEvolvePlotCsv(WriteCsv(dir, kCsv));
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->names, ElementsAre("lr0", "momentum", "hsv_h"));
  ASSERT_EQ(table->rows.size(), 4u);
  EXPECT_FALSE(table->rows[0].failed);
  EXPECT_TRUE(table->rows[2].failed);
  EXPECT_DOUBLE_EQ(table->rows[1].fitness, 0.7);
  EXPECT_THAT(table->rows[1].values, ElementsAre(0.02, 0.9, 0.02));
}

TEST(EvolvePlotsTest, ClassifierMetricsAndOkStatus) {
  const std::string dir = TestDir();
  absl::StatusOr<EvolvePlotTable> table = ReadEvolvePlotCsv(WriteCsv(
      dir,
      "generation,index,status,fitness,test_acc,test_loss,train_loss,val/box_loss,"
      "optimizer.lr0\n0,0,ok,0.9,0.9,0.3,0.2,0.1,0.05\n0,1,timeout,0,,,,,0.2"));
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->names, ElementsAre("optimizer.lr0"));
  ASSERT_EQ(table->rows.size(), 2u);
  EXPECT_FALSE(table->rows[0].failed);
  EXPECT_TRUE(table->rows[1].failed);
}

TEST(EvolvePlotsTest, OnePanelPerHyperparameterTitledWithTheBestValue) {
  const std::string dir = TestDir();
  const std::string svg_path = dir + "/evolve.svg";
  ASSERT_TRUE(WriteEvolvePlot(WriteCsv(dir, kCsv), svg_path).ok());
  std::ifstream in(svg_path);
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::optional<Parsed> parsed = ParseSvg(dir, svg);
  if (!parsed) GTEST_SKIP() << "no python3";
  // The best is row 1 (fitness 0.7).
  EXPECT_THAT(parsed->texts, Contains("lr0 = 0.02"));
  EXPECT_THAT(parsed->texts, Contains("momentum = 0.9"));
  EXPECT_THAT(parsed->texts, Contains("hsv_h = 0.02"));
  // The ok rows, once per panel; the failed one is a tick, not a point.
  EXPECT_EQ(parsed->count, 3 * 3);
  EXPECT_THAT(parsed->texts, Contains(HasSubstr("4 individuals, 1 failed")));
  // No panel for a metric or the reason.
  for (const std::string& t : parsed->texts) {
    EXPECT_THAT(t, ::testing::Not(HasSubstr("mAP")));
    EXPECT_THAT(t, ::testing::Not(HasSubstr("reason")));
  }
}

TEST(EvolvePlotsTest, ZeroAndOneRowsRender) {
  const std::string dir = TestDir();
  const std::vector<std::string> names = {"lr0", "a.very.long.config.key.that.needs.cutting"};
  std::optional<Parsed> none = ParseSvg(dir, RenderEvolveSvg(names, {}));
  if (!none) GTEST_SKIP() << "no python3";
  EXPECT_THAT(none->texts, Contains("lr0"));
  EXPECT_EQ(none->count, 0);

  std::optional<Parsed> one = ParseSvg(dir, RenderEvolveSvg(names, {{0.4, {0.01, 3}}}));
  ASSERT_TRUE(one);
  EXPECT_THAT(one->texts, Contains("lr0 = 0.01"));
  EXPECT_THAT(one->texts, Contains("...hat.needs.cutting = 3"));
  EXPECT_EQ(one->count, 2);

  // Only failures: ticks, no best, no points.
  std::optional<Parsed> failed =
      ParseSvg(dir, RenderEvolveSvg(names, {{0, {0.01, 3}, true}}));
  ASSERT_TRUE(failed);
  EXPECT_THAT(failed->texts, Contains("lr0"));
  EXPECT_EQ(failed->count, 0);

  std::optional<Parsed> nothing = ParseSvg(dir, RenderEvolveSvg({}, {}));
  ASSERT_TRUE(nothing);
  EXPECT_THAT(nothing->texts, Contains(HasSubstr("no hyperparameter")));
}

// A run like the seed's: 12 hyperparameters (one not evolved), 150
// individuals, every 15th failed. Its SVG stays in the test's folder
// (evolve.svg) for a look.
TEST(EvolvePlotsTest, ManyRowsParse) {
  const std::string dir = TestDir();
  const std::vector<std::string> names = {
      "optimizer.lr0", "optimizer.lrf", "optimizer.momentum", "optimizer.weight_decay",
      "warmup_epochs", "loss.box", "loss.cls", "loss.obj", "augment.hsv_h",
      "augment.hsv_s", "augment.mosaic", "augment.fliplr"};
  std::mt19937 gen(7);
  std::normal_distribution<double> noise(0, 1);
  std::vector<EvolvePlotRow> rows;
  for (int i = 0; i < 150; ++i) {
    EvolvePlotRow row;
    row.failed = i % 15 == 7;
    double fitness = 0.45;
    for (size_t k = 0; k < names.size(); ++k) {
      const double centre = 0.01 * static_cast<double>(k + 1);
      const double v = k == 10 ? 1.0 : centre * (1 + 0.2 * noise(gen));
      fitness -= 0.3 * std::abs(v - centre) / centre / static_cast<double>(names.size());
      row.values.push_back(v);
    }
    row.fitness = row.failed ? 0 : fitness + 0.005 * noise(gen);
    rows.push_back(std::move(row));
  }
  const std::string svg = RenderEvolveSvg(names, rows);
  std::ofstream(dir + "/evolve.svg") << svg;
  std::optional<Parsed> parsed = ParseSvg(dir, svg);
  if (!parsed) GTEST_SKIP() << "no python3";
  EXPECT_EQ(parsed->count, 140 * 12);
  EXPECT_THAT(parsed->texts, Contains(HasSubstr("150 individuals, 10 failed")));
}

TEST(EvolvePlotsTest, ErrorsNameFileAndLine) {
  const std::string dir = TestDir();
  struct Case {
    std::string csv;
    std::string line;  // ":N:"
    std::string says;
  };
  const std::vector<Case> cases = {
      {"generation,index,status,lr0\n0,0,done,0.1\n", ":1:", "fitness"},
      {"generation,status,fitness,test_acc,reason\n0,done,1,1,\n", ":1:",
       "no hyperparameter"},
      {"status,fitness,lr0\ndone,0.5,0.1\ndone,0.5\n", ":3:", "2 fields, the header has 3"},
      {"status,fitness,lr0\ndone,0.5,0.1\n\ndone,high,0.1\n", ":4:", "fitness 'high'"},
      {"status,fitness,lr0\nfailed,0,x\n", ":2:", "lr0: 'x' is not a number"},
      {"status,fitness,lr0\ndone,0.5,\"0.1\n", ":2:", "quote"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteCsv(dir, c.csv);
    absl::StatusOr<EvolvePlotTable> table = ReadEvolvePlotCsv(path);
    ASSERT_FALSE(table.ok()) << c.csv;
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(table.status().message(), HasSubstr(path + c.line)) << c.csv;
    EXPECT_THAT(table.status().message(), HasSubstr(c.says)) << c.csv;
  }
  EXPECT_EQ(ReadEvolvePlotCsv(dir + "/absent.csv").status().code(),
            absl::StatusCode::kNotFound);
  // A last line cut short (no newline) by a writer still running is ignored.
  absl::StatusOr<EvolvePlotTable> cut =
      ReadEvolvePlotCsv(WriteCsv(dir, "status,fitness,lr0\ndone,0.5,0.1\ndone,0."));
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->rows.size(), 1u);
}

}  // namespace
}  // namespace elastrun::evolve
