#include "trainer/detect/data_yaml.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/test_files.h"

namespace elastrun::trainer::detect {
namespace {

namespace fs = std::filesystem;
using ::elastrun::trainer::testing::TestDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A dataset folder with images/train, images/val and list.txt, and
// data.yaml holding `yaml`.
std::string WriteYaml(const std::string& dir, const std::string& yaml) {
  fs::create_directories(dir + "/ds/images/train");
  fs::create_directories(dir + "/ds/images/val");
  std::ofstream(dir + "/ds/list.txt") << "./images/train/a.jpg\n";
  std::ofstream(dir + "/data.yaml") << yaml;
  return dir + "/data.yaml";
}

TEST(DataYamlTest, ReadsYolov5FormWithNamesList) {
  const std::string dir = TestDir();
  absl::StatusOr<DataYaml> y = ReadDataYaml(
      WriteYaml(dir,
                "path: ds\ntrain: images/train\nval: [images/val, list.txt]\nnc: 2\n"
                "names: [cat, 'dog']\ndownload: https://example.com/x.zip\n"));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->root, dir + "/ds");
  EXPECT_THAT(y->train, ElementsAre(dir + "/ds/images/train"));
  EXPECT_THAT(y->val, ElementsAre(dir + "/ds/images/val", dir + "/ds/list.txt"));
  EXPECT_TRUE(y->test.empty());
  EXPECT_THAT(y->names, ElementsAre("cat", "dog"));
}

TEST(DataYamlTest, NamesMapWithoutNcAndPathDefaultingToTheFilesFolder) {
  const std::string dir = TestDir();
  absl::StatusOr<DataYaml> y = ReadDataYaml(WriteYaml(
      dir,
      "train: ds/images/train\nval: ds/images/val\ntest:\nnames:\n  1: b\n  0: a\n"));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->root, dir);
  EXPECT_THAT(y->names, ElementsAre("a", "b"));
}

TEST(DataYamlTest, NcWithoutNamesGivesNumberedNames) {
  const std::string dir = TestDir();
  absl::StatusOr<DataYaml> y = ReadDataYaml(
      WriteYaml(dir, "path: ds\ntrain: images/train\nval: images/val\nnc: 3\n"));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(y->names, ElementsAre("class0", "class1", "class2"));
}

TEST(DataYamlTest, MissingKeysAreNamed) {
  const std::string dir = TestDir();
  absl::StatusOr<DataYaml> y =
      ReadDataYaml(WriteYaml(dir, "path: ds\nval: images/val\nnames: [a]\n"));
  EXPECT_TRUE(absl::IsInvalidArgument(y.status()));
  EXPECT_THAT(y.status().message(),
              HasSubstr("data.yaml: missing key 'train': the train images"));
  y = ReadDataYaml(WriteYaml(dir, "path: ds\ntrain: images/train\nnames: [a]\n"));
  EXPECT_THAT(y.status().message(), HasSubstr("missing key 'val'"));
  y = ReadDataYaml(WriteYaml(dir, "path: ds\ntrain: images/train\nval: images/val\n"));
  EXPECT_THAT(y.status().message(), HasSubstr("missing key 'names': the class names"));
}

TEST(DataYamlTest, MissingFolderIsNamedWithItsLine) {
  const std::string dir = TestDir();
  absl::StatusOr<DataYaml> y = ReadDataYaml(
      WriteYaml(dir, "path: ds\ntrain: images/train\nval: images/valid\nnames: [a]\n"));
  EXPECT_TRUE(absl::IsNotFound(y.status()));
  EXPECT_THAT(y.status().message(), HasSubstr("data.yaml:3:6: val: 'images/valid' (" +
                                              dir + "/ds/images/valid) does not exist"));
  y = ReadDataYaml(WriteYaml(dir, "path: nowhere\ntrain: a\nval: b\nnames: [a]\n"));
  EXPECT_THAT(y.status().message(), HasSubstr("data.yaml:1:7: path: 'nowhere'"));
  EXPECT_THAT(y.status().message(), HasSubstr("is not an existing folder"));
}

TEST(DataYamlTest, BadValuesAreNamed) {
  const std::string dir = TestDir();
  const std::string head = "path: ds\ntrain: images/train\nval: images/val\n";
  struct Case {
    const char* tail;
    const char* message;
  };
  for (const Case& c : {
           Case{"nc: 3\nnames: [a, b]\n", "nc: nc is 3 but names lists 2 classes"},
           Case{"nc: 0\n", "nc: expected the number of classes (1 or more), got int 0"},
           Case{"nc: two\n", "nc: expected the number of classes"},
           Case{"names: {0: a, 2: c}\n", "names: class 1 has no name"},
           Case{"names: {a: x}\n", "names: key 'a' is not a class id"},
           Case{"names: cat\n", "names: expected a list of class names or a map"},
           Case{"names: []\n", "names: no class names"},
           Case{"names: [a, [b]]\n", "names: a class name must be text"},
       }) {
    absl::StatusOr<DataYaml> y = ReadDataYaml(WriteYaml(dir, head + c.tail));
    EXPECT_FALSE(y.ok()) << c.tail;
    EXPECT_THAT(y.status().message(), HasSubstr(c.message)) << c.tail;
    EXPECT_THAT(y.status().message(), HasSubstr("data.yaml:")) << c.tail;
  }
  absl::StatusOr<DataYaml> y =
      ReadDataYaml(WriteYaml(dir, "train: [1]\nval: x\nnames: [a]\n"));
  EXPECT_THAT(y.status().message(),
              HasSubstr("data.yaml:1:9: train: expected a folder or .txt file"));
  y = ReadDataYaml(WriteYaml(dir, "train: [a\n"));
  EXPECT_TRUE(absl::IsInvalidArgument(y.status()));
  EXPECT_THAT(y.status().message(), HasSubstr("data.yaml"));
  y = ReadDataYaml(dir + "/none.yaml");
  EXPECT_TRUE(absl::IsNotFound(y.status()));
}

}  // namespace
}  // namespace elastrun::trainer::detect
