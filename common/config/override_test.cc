#include "common/config/override.h"

#include "common/config/loader.h"
#include "common/config/test_util.h"

namespace elastrun::config {
namespace {

using ::testing::HasSubstr;
using testing::ErrorOf;

Node Config() {
  return *ParseYaml(
      "model:\n  hidden: [128]\n  act: relu\n"
      "optimizer:\n  lr: 0.1\n  momentum: 0.9\n"
      "trainer:\n  epochs: 3\n  old_key: 1\n",
      "cfg.yaml");
}

absl::StatusOr<Node> Apply(std::vector<std::string> overrides) {
  Node root = Config();
  absl::Status s = ApplyOverrides(overrides, &root);
  if (!s.ok()) return s;
  return root;
}

TEST(OverrideTest, SetsScalarKeepingYamlType) {
  absl::StatusOr<Node> n = Apply({"optimizer.lr=0.02", "trainer.epochs=7"});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_DOUBLE_EQ(n->Find("optimizer")->Find("lr")->as_double(), 0.02);
  EXPECT_EQ(n->Find("trainer")->Find("epochs")->as_int(), 7);
  EXPECT_EQ(n->Find("optimizer")->Find("lr")->mark().ToString(),
            "override #1 'optimizer.lr=0.02':1:14");
}

TEST(OverrideTest, SetsFlowListAndMap) {
  absl::StatusOr<Node> n = Apply({"model.hidden=[256,256]", "model.act={name: gelu}"});
  ASSERT_TRUE(n.ok()) << n.status();
  const Node* hidden = n->Find("model")->Find("hidden");
  ASSERT_EQ(hidden->items().size(), 2u);
  EXPECT_EQ(hidden->items()[1].as_int(), 256);
  EXPECT_EQ(n->Find("model")->Find("act")->Find("name")->as_string(), "gelu");
}

TEST(OverrideTest, QuotingKeepsStrings) {
  absl::StatusOr<Node> n =
      Apply({"model.act='a b'", "optimizer.lr=\"1\"", "trainer.epochs=a b",
             "trainer.old_key=", "optimizer.momentum=null"});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("model")->Find("act")->as_string(), "a b");
  EXPECT_EQ(n->Find("optimizer")->Find("lr")->kind(), Node::Kind::kString);
  EXPECT_EQ(n->Find("optimizer")->Find("lr")->as_string(), "1");
  EXPECT_EQ(n->Find("trainer")->Find("epochs")->as_string(), "a b");
  EXPECT_EQ(n->Find("trainer")->Find("old_key")->as_string(), "");
  EXPECT_TRUE(n->Find("optimizer")->Find("momentum")->is_null());
}

TEST(OverrideTest, IndexesIntoList) {
  absl::StatusOr<Node> n = Apply({"model.hidden.0=64"});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("model")->Find("hidden")->items()[0].as_int(), 64);
  EXPECT_THAT(ErrorOf(Apply({"model.hidden.5=1"})),
              HasSubstr("'model.hidden' is a list of 1; '5' is not an index"));
}

TEST(OverrideTest, SetOfMissingKeyNamesClosestKeys) {
  const std::string error = ErrorOf(Apply({"optimizer.lrr=0.1"}));
  EXPECT_THAT(error, HasSubstr("override #1 'optimizer.lrr=0.1':1:1: optimizer.lrr: "
                               "no such key to override; did you mean: optimizer.lr?"));
  EXPECT_THAT(error, HasSubstr("write +optimizer.lrr=... to add it"));
  EXPECT_THAT(ErrorOf(Apply({"optimiser.lr=0.1"})),
              HasSubstr("no key 'optimiser'; did you mean: optimizer?"));
}

TEST(OverrideTest, AddCreatesKeyAndParents) {
  absl::StatusOr<Node> n = Apply({"+trainer.new_key=1", "+extra.deep.key=x"});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("trainer")->Find("new_key")->as_int(), 1);
  EXPECT_EQ(n->Find("extra")->Find("deep")->Find("key")->as_string(), "x");
}

TEST(OverrideTest, AddOfExistingKeyFails) {
  EXPECT_THAT(ErrorOf(Apply({"+trainer.epochs=1"})),
              HasSubstr("trainer.epochs: key exists (int 3 from cfg.yaml:8:11); to "
                        "change it write trainer.epochs=... without '+'"));
}

TEST(OverrideTest, UpsertAddsOrChanges) {
  absl::StatusOr<Node> n = Apply({"++trainer.epochs=5", "++trainer.fresh=true"});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("trainer")->Find("epochs")->as_int(), 5);
  EXPECT_TRUE(n->Find("trainer")->Find("fresh")->as_bool());
}

TEST(OverrideTest, DeleteRemovesKey) {
  absl::StatusOr<Node> n = Apply({"~trainer.old_key"});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("trainer")->Find("old_key"), nullptr);
}

TEST(OverrideTest, DeleteOfMissingKeyFails) {
  EXPECT_THAT(ErrorOf(Apply({"~trainer.old_kye"})),
              HasSubstr("trainer.old_kye: no such key to delete; did you mean: "
                        "trainer.old_key?"));
}

TEST(OverrideTest, LaterOverridesSeeEarlierOnes) {
  absl::StatusOr<Node> n = Apply({"+a=1", "a=2"});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("a")->as_int(), 2);
  EXPECT_THAT(ErrorOf(Apply({"+a=1", "a=2", "~a", "a=3"})),
              HasSubstr("override #4 'a=3':1:1: a: no such key to override"));
}

TEST(OverrideTest, PathThroughScalarFails) {
  EXPECT_THAT(ErrorOf(Apply({"optimizer.lr.x=1"})),
              HasSubstr("'optimizer.lr' is a double 0.1 (cfg.yaml:5:7), not a mapping"));
}

TEST(OverrideTest, BadSyntaxIsReportedWithColumn) {
  EXPECT_THAT(ErrorOf(ParseOverride("optimizer.lr", 1)),
              HasSubstr("override #1 'optimizer.lr':1:13: missing '='"));
  EXPECT_THAT(ErrorOf(ParseOverride("=1", 2)), HasSubstr("empty key"));
  EXPECT_THAT(ErrorOf(ParseOverride("a b=1", 1)),
              HasSubstr(":1:2: unexpected character ' ' in key 'a b'"));
  EXPECT_THAT(ErrorOf(ParseOverride("a..b=1", 1)), HasSubstr("empty segment"));
  EXPECT_THAT(ErrorOf(ParseOverride("~a=1", 1)), HasSubstr("takes no value"));
  EXPECT_THAT(ErrorOf(ParseOverride("a=1,2", 1)), HasSubstr("must be one YAML value"));
  EXPECT_THAT(ErrorOf(ParseOverride("model.hidden=[1,2", 3)),
              HasSubstr("override #3 'model.hidden=[1,2':1:"));
  EXPECT_THAT(ErrorOf(ParseOverride("model.hidden=[1,2", 3)),
              HasSubstr("YAML syntax error"));
  EXPECT_THAT(ErrorOf(ParseOverride("_base_=x.yaml", 1)),
              HasSubstr("_base_ cannot be overridden"));
}

TEST(OverrideTest, ValueMayHoldInterpolation) {
  absl::StatusOr<Override> o = ParseOverride("a=${trainer.epochs}", 1);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->value.kind(), Node::Kind::kInterpolation);
  absl::StatusOr<Override> in_list = ParseOverride("a=[${b}, '${c}', \"${d}\", 1]", 1);
  ASSERT_TRUE(in_list.ok()) << in_list.status();
  ASSERT_EQ(in_list->value.items().size(), 4u);
  EXPECT_EQ(in_list->value.items()[0].kind(), Node::Kind::kInterpolation);
  EXPECT_EQ(in_list->value.items()[2].kind(), Node::Kind::kInterpolation);
  absl::StatusOr<Override> in_text = ParseOverride("a=run_${b}", 1);
  ASSERT_TRUE(in_text.ok()) << in_text.status();
  EXPECT_EQ(in_text->value.kind(), Node::Kind::kInterpolation);
  absl::StatusOr<Override> url = ParseOverride("a=http://host/x", 1);
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->value.as_string(), "http://host/x");
}

TEST(OverrideTest, NodeLimitIsEnforced) {
  Limits limits;
  limits.max_nodes = 20;
  Node root = Config();
  EXPECT_THAT(ErrorOf(ApplyOverrides({"+big=[1,2,3,4,5,6,7,8,9,10,11,12,13,14]"},
                                     &root, limits)),
              HasSubstr("more than 20 values"));
}

}  // namespace
}  // namespace elastrun::config
