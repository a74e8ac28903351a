// The scan of a YOLOv5 folder against data_reference.py, a second reading
// of the same files written from YOLOv5's verify_image_label with numpy.
#include <map>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "trainer/detect/data.h"
#include "trainer/detect/data_test_util.h"
#include "trainer/test_files.h"

namespace elastrun::trainer::detect {
namespace {

using ::elastrun::trainer::testing::RunCommand;
using ::elastrun::trainer::testing::TestDir;
using test_util::WriteImage;
using test_util::WriteText;

// A label file of random lines, most valid, some of each malformed kind.
std::string RandomLabels(uint64_t& state, int num_classes) {
  const auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(state >> 33);
  };
  const auto unit = [&] { return (next() % 1000001) / 1e6; };
  std::string text;
  const int lines = static_cast<int>(next() % 6);
  std::string previous;
  for (int i = 0; i < lines; ++i) {
    const int kind = static_cast<int>(next() % 40);
    const int cls = static_cast<int>(next() % num_classes);
    std::string line;
    const double cx = unit(), cy = unit(), w = unit() * 0.5, h = unit() * 0.5;
    if (kind == 0) {
      line = absl::StrFormat("%d %.6f %.6f %.6f", cls, cx, cy, w);  // 4 columns
    } else if (kind == 1) {
      line = absl::StrFormat("%d %.6f %.6f %.6f %.6f", cls, cx, cy, w + 1.01, h);  // > 1
    } else if (kind == 2) {
      line = absl::StrFormat("%d %.6f -%.6f %.6f %.6f", cls, cx, cy + 0.1, w,
                             h);  // negative
    } else if (kind == 3 && !previous.empty()) {
      line = previous;       // a duplicate
    } else if (kind == 4) {  // a polygon
      line = absl::StrFormat("%d %.4f %.4f %.4f %.4f %.4f %.4f", cls, unit(), unit(),
                             unit(), unit(), unit(), unit());
    } else if (kind == 5) {
      line = absl::StrFormat("%d %g %.3e %.8f %g", cls, cx, cy, w, h);  // other spellings
    } else {
      line =
          absl::StrFormat("%d %.6f %.6f %.6f %.6f", cls, cx, cy, w, h);  // may reach out
    }
    previous = line;
    absl::StrAppend(&text, line, next() % 5 == 0 ? "\r\n" : "\n");
  }
  return text;
}

TEST(DataReferenceTest, LabelsReadAsTheNumpyReadingReadsThem) {
  const std::string d = TestDir();
  uint64_t state = 42;
  for (int i = 0; i < 150; ++i) {
    const std::string name =
        absl::StrFormat("%s/images/%s%03d", d, i % 4 == 0 ? "sub/" : "", i);
    WriteImage(name + ".png", 16, 12);
    if (i % 10 == 9) continue;  // no label file
    WriteText(absl::StrFormat("%s/labels/%s%03d.txt", d, i % 4 == 0 ? "sub/" : "", i),
              RandomLabels(state, 5));
  }
  absl::StatusOr<Split> split = ScanSplit("train", {d + "/images"}, 5);
  ASSERT_TRUE(split.ok()) << split.status();
  std::map<std::string, const ImageEntry*> ours;
  for (const ImageEntry& e : split->images) ours[e.path] = &e;

  int status = 0;
  const std::string out =
      RunCommand(absl::StrCat("/usr/bin/python3 ", ELASTRUN_DETECT_DATA_REFERENCE,
                              " labels ", d, "/images"),
                 &status);
  ASSERT_EQ(status, 0) << out;
  int records = 0, corrupt = 0;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    const nlohmann::json record = nlohmann::json::parse(line);
    const std::string path = absl::HexStringToBytes(record["image"].get<std::string>());
    ++records;
    const auto it = ours.find(path);
    if (record.contains("corrupt")) {
      ++corrupt;
      EXPECT_EQ(it, ours.end())
          << path << " is corrupt to the reference: " << record["corrupt"];
      continue;
    }
    ASSERT_NE(it, ours.end()) << path << " was left out";
    const std::vector<Label>& labels = it->second->labels;
    ASSERT_EQ(labels.size(), record["labels"].size()) << path;
    for (size_t k = 0; k < labels.size(); ++k) {
      const auto& row = record["labels"][k];
      EXPECT_EQ(labels[k].cls, row[0].get<double>()) << path << " label " << k;
      EXPECT_NEAR(labels[k].cx, row[1].get<double>(), 1e-7) << path << " label " << k;
      EXPECT_NEAR(labels[k].cy, row[2].get<double>(), 1e-7) << path << " label " << k;
      EXPECT_NEAR(labels[k].w, row[3].get<double>(), 1e-7) << path << " label " << k;
      EXPECT_NEAR(labels[k].h, row[4].get<double>(), 1e-7) << path << " label " << k;
    }
  }
  EXPECT_EQ(records, 150);
  EXPECT_EQ(split->counts.corrupt, corrupt);
  EXPECT_GT(corrupt, 10);  // the malformed kinds were drawn
  EXPECT_GT(split->counts.duplicates, 0);
  EXPECT_GT(split->counts.clipped, 0);
}

}  // namespace
}  // namespace elastrun::trainer::detect
