#include "common/config/interpolate.h"

#include "common/config/loader.h"
#include "common/config/test_util.h"

namespace elastrun::config {
namespace {

using ::testing::HasSubstr;
using testing::ErrorOf;

absl::StatusOr<Node> Resolve(const std::string& yaml, const Limits& limits = {}) {
  absl::StatusOr<Node> n = ParseYaml(yaml, "i.yaml", limits);
  if (!n.ok()) return n;
  absl::Status s = ResolveInterpolations(&*n, limits);
  if (!s.ok()) return s;
  return n;
}

TEST(InterpolateTest, WholeValueKeepsType) {
  absl::StatusOr<Node> n = Resolve(
      "data: {batch_size: 64, shape: [1, 28, 28], opts: {a: 1}}\n"
      "opt: {bs: '${data.batch_size}', shape: '${data.shape}', o: '${data.opts}'}\n");
  ASSERT_TRUE(n.ok()) << n.status();
  const Node* opt = n->Find("opt");
  EXPECT_EQ(opt->Find("bs")->as_int(), 64);
  EXPECT_EQ(opt->Find("shape")->items().size(), 3u);
  EXPECT_EQ(opt->Find("o")->Find("a")->as_int(), 1);
  // The copy points at the reference, where the user wrote it.
  EXPECT_EQ(opt->Find("bs")->mark().ToString(), "i.yaml:2:11");
}

TEST(InterpolateTest, InsideStringSubstitutesText) {
  absl::StatusOr<Node> n = Resolve(
      "train: {epochs: 3, lr: 0.5, name: 'run_${train.epochs}_${train.lr}'}\n");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("train")->Find("name")->as_string(), "run_3_0.5");
}

TEST(InterpolateTest, ChainsAndForwardReferencesResolve) {
  absl::StatusOr<Node> n = Resolve("a: ${b}\nb: ${c.x}\nc: {x: '${d}'}\nd: 7\n");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("a")->as_int(), 7);
  EXPECT_EQ(n->Find("c")->Find("x")->as_int(), 7);
}

TEST(InterpolateTest, ReferencesThroughInterpolatedMapAndListIndex) {
  absl::StatusOr<Node> n =
      Resolve("src: {k: [10, 20]}\nalias: ${src}\nv: ${alias.k[1]}\nw: ${alias.k.0}\n");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("v")->as_int(), 20);
  EXPECT_EQ(n->Find("w")->as_int(), 10);
}

TEST(InterpolateTest, EscapedDollarIsLiteral) {
  absl::StatusOr<Node> n = Resolve("a: '\\${not.a.ref}'\n");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("a")->as_string(), "${not.a.ref}");
}

TEST(InterpolateTest, MissingTargetNamesKeyAndClosest) {
  EXPECT_THAT(ErrorOf(Resolve("data:\n  batch_size: 8\nopt:\n  bs: ${data.batchsize}\n")),
              HasSubstr("i.yaml:4:7: opt.bs: ${data.batchsize}: no key "
                        "'data.batchsize' in the config; did you mean: data.batch_size?"));
}

TEST(InterpolateTest, CycleIsReportedWithChain) {
  EXPECT_THAT(ErrorOf(Resolve("a: ${b}\nb: ${c}\nc: ${a}\n")),
              HasSubstr("interpolation cycle: a -> b -> c -> a"));
  EXPECT_THAT(ErrorOf(Resolve("a: {x: 1, self: '${a}'}\n")),
              HasSubstr("interpolation cycle: a -> a.self -> a"));
  EXPECT_THAT(ErrorOf(Resolve("a: 'x${a}'\n")), HasSubstr("interpolation cycle: a -> a"));
}

TEST(InterpolateTest, ContainerInsideStringFails) {
  EXPECT_THAT(ErrorOf(Resolve("l: [1]\ns: 'x${l}'\n")),
              HasSubstr("s: ${l} is a list of 1 (i.yaml:1:4); only a scalar can be "
                        "part of a string"));
}

TEST(InterpolateTest, LongChainIsBounded) {
  Limits limits;
  limits.max_interpolation_depth = 5;
  std::string yaml;
  for (int i = 0; i < 10; ++i) {
    yaml += "k" + std::to_string(i) + ": ${k" + std::to_string(i + 1) + "}\n";
  }
  yaml += "k10: 1\n";
  EXPECT_THAT(ErrorOf(Resolve(yaml, limits)), HasSubstr("interpolation chain longer than 5"));
}

TEST(InterpolateTest, ExponentialStringGrowthIsBounded) {
  Limits limits;
  limits.max_string_bytes = 1000;
  std::string yaml = "s0: xxxxxxxxxxxxxxxx\n";
  for (int i = 1; i < 30; ++i) {
    yaml += "s" + std::to_string(i) + ": ${s" + std::to_string(i - 1) + "}${s" +
            std::to_string(i - 1) + "}\n";
  }
  EXPECT_THAT(ErrorOf(Resolve(yaml, limits)), HasSubstr("longer than 1000 bytes"));
}

TEST(InterpolateTest, ExponentialCopiesAreBounded) {
  Limits limits;
  limits.max_nodes = 5000;
  std::string yaml = "l0: [1, 2]\n";
  for (int i = 1; i < 30; ++i) {
    yaml += "l" + std::to_string(i) + ": ['${l" + std::to_string(i - 1) + "}', '${l" +
            std::to_string(i - 1) + "}']\n";
  }
  EXPECT_THAT(ErrorOf(Resolve(yaml, limits)), HasSubstr("copies more than 5000 values"));
}

}  // namespace
}  // namespace elastrun::config
