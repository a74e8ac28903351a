#include "common/config/emitter.h"

#include <cmath>

#include "common/config/config.h"
#include "common/config/loader.h"
#include "common/config/test_util.h"

namespace elastrun::config {
namespace {

using ::testing::HasSubstr;

// ToYaml then ParseYaml must give back the same values and types.
void ExpectRoundTrip(const Node& n) {
  const std::string yaml = ToYaml(n);
  absl::StatusOr<Node> back = ParseYaml(yaml, "emitted.yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, n) << yaml;
}

TEST(EmitterTest, WritesReadableBlockYaml) {
  Node n = *ParseYaml(
      "model:\n  _target_: MLP\n  hidden: [256, 256]\n"
      "optimizer:\n  lr: 0.01\n  nesterov: true\n  name: sgd\n  none: null\n"
      "layers:\n  - {type: conv, k: 3}\n  - [1, [2]]\n  - plain\n"
      "empty_map: {}\nempty_list: []\n",
      "in.yaml");
  const std::string yaml = ToYaml(n);
  EXPECT_THAT(yaml, HasSubstr("model:\n  _target_: MLP\n  hidden: [256, 256]\n"));
  EXPECT_THAT(yaml, HasSubstr("  lr: 0.01\n  nesterov: true\n  name: sgd\n  none: null\n"));
  EXPECT_THAT(yaml, HasSubstr("layers:\n  - type: conv\n    k: 3\n"));
  EXPECT_THAT(yaml, HasSubstr("empty_map: {}\nempty_list: []\n"));
  ExpectRoundTrip(n);
}

TEST(EmitterTest, QuotesStringsThatWouldChangeType) {
  Node n = Node::Map();
  for (const char* s : {"1", "1.0", "true", "null", "~", "", "0x10", ".inf", "1e3",
                        "a: b", "- x", "#c", "[x]", "{y}", " pad ", "multi\nline",
                        "tab\there", "quote\"d", "back\\slash", "it's", "*alias",
                        "&anchor", "!tag", "%dir", "@at", "`tick", "ünïcode",
                        "ctrl\x01", "x,y", "99999999999999999999",
                        // Fuzzer findings.
                        "ela?tsrun", "a&b", "a*b", "a!b", "a|b", "a>b", "a%b",
                        "\x12\x12", "caf\xc3\xa9"}) {
    n.Set(std::string("k") + std::to_string(n.entries().size()), Node::String(s));
  }
  ExpectRoundTrip(n);
}

TEST(EmitterTest, KeepsNumberTypesAndSpecials) {
  Node n = Node::Map();
  n.Set("int", Node::Int(3));
  n.Set("neg", Node::Int(INT64_MIN));
  n.Set("whole_double", Node::Double(3.0));
  n.Set("small", Node::Double(1e-7));
  n.Set("third", Node::Double(1.0 / 3.0));
  n.Set("big", Node::Double(1e300));
  n.Set("inf", Node::Double(HUGE_VAL));
  n.Set("ninf", Node::Double(-HUGE_VAL));
  n.Set("nan", Node::Double(NAN));
  ExpectRoundTrip(n);
  EXPECT_THAT(ToYaml(n), HasSubstr("whole_double: 3.0\n"));
}

TEST(EmitterTest, LiteralDollarBraceStaysLiteral) {
  Node n = Node::Map();
  n.Set("lit", Node::String("cost ${x}"));
  n.Set("backslash_lit", Node::String("a\\${y}"));
  ExpectRoundTrip(n);
  // After reading back, nothing is left to interpolate.
  Node back = *ParseYaml(ToYaml(n), "e.yaml");
  EXPECT_EQ(back.Find("lit")->kind(), Node::Kind::kString);
}

TEST(EmitterTest, UnresolvedInterpolationRoundTrips) {
  Node n = *ParseYaml("a: 1\nb: ${a}\nc: 'x_${a}'\n", "in.yaml");
  ExpectRoundTrip(n);
}

TEST(EmitterTest, QuotesAwkwardKeys) {
  Node n = Node::Map();
  n.Set("null", Node::Int(1));
  n.Set("a: b", Node::Int(2));
  n.Set("1", Node::Int(3));
  n.Set("with space", Node::Int(4));
  ExpectRoundTrip(n);
}

TEST(EmitterTest, NestedListsOfMapsRoundTrip) {
  Node n = *ParseYaml(
      "a:\n  - - {x: 1}\n    - {y: [1, {z: 2}]}\n  - {}\n  - []\n  - [[]]\n", "in.yaml");
  ExpectRoundTrip(n);
}

TEST(EmitterTest, FlowYaml) {
  Node n = *ParseYaml("a: [1, 'two', {b: null}]\n", "in.yaml");
  EXPECT_EQ(ToFlowYaml(*n.Find("a")), "[1, two, {b: null}]");
  EXPECT_EQ(ToFlowYaml(Node::String("1")), "\"1\"");
}

TEST(EmitterTest, ResolvedConfigRoundTripsThroughLoadConfig) {
  absl::StatusOr<Node> n = LoadConfigFromString(
      "data: {bs: 8}\nopt: {bs: '${data.bs}', name: 'r_${data.bs}'}\n", "mem.yaml",
      {"data.bs=16"});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("opt")->Find("bs")->as_int(), 16);
  absl::StatusOr<Node> again = LoadConfigFromString(ToYaml(*n), "again.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *n);
}

}  // namespace
}  // namespace elastrun::config
