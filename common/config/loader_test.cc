#include "common/config/loader.h"

#include <cmath>

#include "common/config/test_util.h"

namespace elastrun::config {
namespace {

using ::testing::HasSubstr;
using testing::ErrorOf;
using testing::TestDir;
using testing::WriteFile;

TEST(ParseYamlTest, TypesFollowTheYaml12CoreSchema) {
  absl::StatusOr<Node> n = ParseYaml(
      "i: 3\nneg: -4\nhex: 0x1F\nd: 0.5\ne: 1e-3\ninf: .inf\nb: true\nn: null\n"
      "t: ~\nempty:\ns: hello\nq: '1'\ndq: \"true\"\ntagged: !!str 5\n"
      "yes11: yes\n",
      "t.yaml");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("i")->as_int(), 3);
  EXPECT_EQ(n->Find("neg")->as_int(), -4);
  EXPECT_EQ(n->Find("hex")->as_int(), 31);
  EXPECT_EQ(n->Find("d")->kind(), Node::Kind::kDouble);
  EXPECT_DOUBLE_EQ(n->Find("e")->as_double(), 1e-3);
  EXPECT_TRUE(std::isinf(n->Find("inf")->as_double()));
  EXPECT_TRUE(n->Find("b")->as_bool());
  EXPECT_TRUE(n->Find("n")->is_null());
  EXPECT_TRUE(n->Find("t")->is_null());
  EXPECT_TRUE(n->Find("empty")->is_null());
  EXPECT_EQ(n->Find("s")->as_string(), "hello");
  EXPECT_EQ(n->Find("q")->kind(), Node::Kind::kString);
  EXPECT_EQ(n->Find("dq")->as_string(), "true");
  EXPECT_EQ(n->Find("tagged")->as_string(), "5");
  EXPECT_EQ(n->Find("yes11")->as_string(), "yes");  // YAML 1.1's bool is 1.2's string.
}

TEST(ParseYamlTest, EveryValueRemembersFileLineColumn) {
  absl::StatusOr<Node> n =
      ParseYaml("optimizer:\n  lr: 0.1\n  betas: [0.9, 0.99]\n", "cfg.yaml");
  ASSERT_TRUE(n.ok()) << n.status();
  const Node* lr = n->Find("optimizer")->Find("lr");
  EXPECT_EQ(lr->mark().ToString(), "cfg.yaml:2:7");
  EXPECT_EQ(n->Find("optimizer")->entries()[0].key_mark.ToString(), "cfg.yaml:2:3");
  EXPECT_EQ(n->Find("optimizer")->Find("betas")->items()[1].mark().ToString(),
            "cfg.yaml:3:16");
}

TEST(ParseYamlTest, EmptyDocumentIsEmptyMap) {
  absl::StatusOr<Node> n = ParseYaml("# nothing\n", "e.yaml");
  ASSERT_TRUE(n.ok());
  EXPECT_TRUE(n->is_map());
  EXPECT_TRUE(n->entries().empty());
}

TEST(ParseYamlTest, SyntaxErrorNamesPosition) {
  EXPECT_THAT(ErrorOf(ParseYaml("a: [1, 2\nb: 3\n", "bad.yaml")),
              HasSubstr("bad.yaml:"));
  EXPECT_THAT(ErrorOf(ParseYaml("a: [1, 2\nb: 3\n", "bad.yaml")),
              HasSubstr("YAML syntax error"));
}

TEST(ParseYamlTest, RejectsNonMapTopLevelAndSeveralDocuments) {
  EXPECT_THAT(ErrorOf(ParseYaml("[1, 2]\n", "l.yaml")),
              HasSubstr("l.yaml:1:1: the top level of a config must be a mapping"));
  EXPECT_THAT(ErrorOf(ParseYaml("a: 1\n---\nb: 2\n", "d.yaml")),
              HasSubstr("d.yaml:2:1: content after the end of the document"));
}

// Fuzzer finding: yaml-cpp 0.7 loops forever (allocating) on a top-level
// ',' after a document; it must be an error instead.
TEST(ParseYamlTest, StrayCommaAfterDocumentIsAnErrorNotAHang) {
  EXPECT_THAT(ErrorOf(ParseYaml(", out: 1}\n", "c.yaml")),
              HasSubstr("content after the end of the document"));
  EXPECT_THAT(ErrorOf(ParseYaml("[1], 2\n", "c.yaml")),
              HasSubstr("content after the end of the document"));
  EXPECT_FALSE(ParseYamlValue(",", "c.yaml").ok());
}

TEST(ParseYamlTest, RejectsDuplicateKeysNamingBothLines) {
  EXPECT_THAT(ErrorOf(ParseYaml("train:\n  seed: 1\n  seed: 2\n", "dup.yaml")),
              HasSubstr("dup.yaml:3:3: train.seed: duplicate key; first written at "
                        "dup.yaml:2:3"));
}

// Fuzzer finding: a long key with escaped bytes came back longer than
// YAML's 1024-character limit on implicit keys.
TEST(ParseYamlTest, RejectsOverlongKeys) {
  EXPECT_THAT(ErrorOf(ParseYaml("a:\n  " + std::string(300, 'k') + ": 1\n", "k.yaml")),
              HasSubstr("k.yaml:2:3: a: key longer than 200 bytes"));
}

TEST(ParseYamlTest, RejectsOutOfRangeIntegerWithKey) {
  EXPECT_THAT(ErrorOf(ParseYaml("a:\n  b: 99999999999999999999\n", "big.yaml")),
              HasSubstr("big.yaml:2:6: a.b: integer 99999999999999999999 is out of range"));
}

TEST(ParseYamlTest, RejectsUnsupportedTagAndNestedBase) {
  EXPECT_THAT(ErrorOf(ParseYaml("a: !custom 1\n", "t.yaml")),
              HasSubstr("unsupported YAML tag"));
  EXPECT_THAT(ErrorOf(ParseYaml("a:\n  _base_: x.yaml\n", "t.yaml")),
              HasSubstr("t.yaml:2:3: a._base_: _base_ is only allowed at the top level"));
}

TEST(ParseYamlTest, LimitsDepthAndAliasExpansion) {
  Limits limits;
  limits.max_depth = 3;
  EXPECT_THAT(ErrorOf(ParseYaml("a: {b: {c: {d: 1}}}\n", "deep.yaml", limits)),
              HasSubstr("nested deeper than 3 levels"));
  limits = Limits();
  limits.max_nodes = 1000;
  // A "billion laughs": each level doubles the expanded size.
  std::string laughs = "a0: &a0 [x, x]\n";
  for (int i = 1; i < 20; ++i) {
    laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [*a" +
              std::to_string(i - 1) + ", *a" + std::to_string(i - 1) + "]\n";
  }
  EXPECT_THAT(ErrorOf(ParseYaml(laughs, "laughs.yaml", limits)),
              HasSubstr("more than 1000 values"));
}

TEST(LoadFileTest, BaseMergesDeeplyChildWins) {
  const std::string dir = TestDir();
  WriteFile(dir, "base/defaults.yaml",
            "optimizer:\n  _target_: SGD\n  lr: 0.1\n  momentum: 0.9\n"
            "train:\n  epochs: 10\n");
  const std::string main = WriteFile(
      dir, "exp/main.yaml",
      "_base_: ../base/defaults.yaml\noptimizer:\n  lr: 0.2\ntrain:\n  seed: 3\n");
  absl::StatusOr<Node> n = LoadFile(main);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("_base_"), nullptr);
  EXPECT_DOUBLE_EQ(n->Find("optimizer")->Find("lr")->as_double(), 0.2);
  EXPECT_DOUBLE_EQ(n->Find("optimizer")->Find("momentum")->as_double(), 0.9);
  EXPECT_EQ(n->Find("train")->Find("epochs")->as_int(), 10);
  EXPECT_EQ(n->Find("train")->Find("seed")->as_int(), 3);
  // The overridden value points at the child, the inherited one at the base.
  EXPECT_THAT(n->Find("optimizer")->Find("lr")->mark().file, HasSubstr("main.yaml"));
  EXPECT_THAT(n->Find("optimizer")->Find("momentum")->mark().file,
              HasSubstr("defaults.yaml"));
}

TEST(LoadFileTest, BaseListMergesInOrderLaterWins) {
  const std::string dir = TestDir();
  WriteFile(dir, "a.yaml", "x: 1\ny: 1\n");
  WriteFile(dir, "b.yaml", "y: 2\nz: 2\n");
  const std::string main = WriteFile(dir, "m.yaml", "_base_: [a.yaml, b.yaml]\nz: 3\n");
  absl::StatusOr<Node> n = LoadFile(main);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("x")->as_int(), 1);
  EXPECT_EQ(n->Find("y")->as_int(), 2);
  EXPECT_EQ(n->Find("z")->as_int(), 3);
}

TEST(LoadFileTest, DifferentTargetReplacesWholeMapping) {
  const std::string dir = TestDir();
  WriteFile(dir, "a.yaml", "model:\n  _target_: MLP\n  hidden: [1]\n");
  const std::string main = WriteFile(
      dir, "m.yaml", "_base_: a.yaml\nmodel:\n  _target_: CNN\n  channels: [2]\n");
  absl::StatusOr<Node> n = LoadFile(main);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("model")->Find("hidden"), nullptr);
  EXPECT_NE(n->Find("model")->Find("channels"), nullptr);
}

TEST(LoadFileTest, CycleIsReportedWithTheChain) {
  const std::string dir = TestDir();
  WriteFile(dir, "a.yaml", "_base_: b.yaml\n");
  WriteFile(dir, "b.yaml", "x: 1\n_base_: a.yaml\n");
  const std::string error = ErrorOf(LoadFile(dir + "/a.yaml"));
  EXPECT_THAT(error, HasSubstr("b.yaml:2:9: _base_: cyclic _base_: "));
  EXPECT_THAT(error, HasSubstr("a.yaml -> " + dir + "/b.yaml -> " + dir + "/a.yaml"));
}

TEST(LoadFileTest, SelfIncludeIsACycle) {
  const std::string dir = TestDir();
  WriteFile(dir, "a.yaml", "_base_: ./a.yaml\n");
  EXPECT_THAT(ErrorOf(LoadFile(dir + "/a.yaml")), HasSubstr("cyclic _base_"));
}

TEST(LoadFileTest, DiamondIsNotACycle) {
  const std::string dir = TestDir();
  WriteFile(dir, "common.yaml", "x: 1\n");
  WriteFile(dir, "a.yaml", "_base_: common.yaml\na: 1\n");
  WriteFile(dir, "b.yaml", "_base_: common.yaml\nb: 1\n");
  WriteFile(dir, "m.yaml", "_base_: [a.yaml, b.yaml]\n");
  absl::StatusOr<Node> n = LoadFile(dir + "/m.yaml");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->entries().size(), 3u);
}

TEST(LoadFileTest, MissingBaseNamesTheIncludingLine) {
  const std::string dir = TestDir();
  WriteFile(dir, "m.yaml", "a: 1\n_base_: [nope.yaml]\n");
  EXPECT_THAT(ErrorOf(LoadFile(dir + "/m.yaml")),
              HasSubstr("m.yaml:2:10: _base_: cannot read '" + dir + "/nope.yaml'"));
}

TEST(LoadFileTest, BadBaseValue) {
  const std::string dir = TestDir();
  WriteFile(dir, "m.yaml", "_base_: {a: 1}\n");
  EXPECT_THAT(ErrorOf(LoadFile(dir + "/m.yaml")),
              HasSubstr("expected a file name or a list of them"));
}

TEST(LoadFileTest, MissingFileIsNotFound) {
  absl::StatusOr<Node> n = LoadFile(TestDir() + "/absent.yaml");
  EXPECT_EQ(n.status().code(), absl::StatusCode::kNotFound);
}

TEST(LoadFileTest, LongBaseChainIsBounded) {
  LoadOptions options;
  options.limits.max_base_depth = 4;
  options.read_file = [](const std::string& path) -> absl::StatusOr<std::string> {
    // f0 -> f1 -> f2 -> ... forever.
    const int n = std::stoi(path.substr(path.find('f') + 1));
    return "_base_: f" + std::to_string(n + 1) + ".yaml\n";
  };
  EXPECT_THAT(ErrorOf(LoadFile("f0.yaml", options)),
              HasSubstr("_base_ chain longer than 4: f0.yaml -> f1.yaml"));
}

TEST(LoadFileTest, FileCountIsBounded) {
  LoadOptions options;
  options.limits.max_files = 10;
  // Each file includes two others: 2^depth files without the bound.
  options.read_file = [](const std::string& path) -> absl::StatusOr<std::string> {
    if (path.size() > 12) return std::string("x: 1\n");
    const std::string stem = path.substr(0, path.size() - 5);
    return "_base_: [" + stem + "a.yaml, " + stem + "b.yaml]\n";
  };
  EXPECT_THAT(ErrorOf(LoadFile("r.yaml", options)),
              HasSubstr("more than 10 files read through _base_"));
}

TEST(MergeTest, ChildScalarReplacesMapAndListsAreReplaced) {
  Node base = *ParseYaml("a: {x: 1}\nl: [1, 2, 3]\n", "b");
  Node child = *ParseYaml("a: 5\nl: [9]\n", "c");
  Node merged = Merge(base, child);
  EXPECT_EQ(merged.Find("a")->as_int(), 5);
  EXPECT_EQ(merged.Find("l")->items().size(), 1u);
}

}  // namespace
}  // namespace elastrun::config
