#include "common/config/node.h"

#include "common/config/suggest.h"
#include "common/config/test_util.h"

namespace elastrun::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ErrorOf;

TEST(MarkTest, FormatsFileLineColumn) {
  EXPECT_EQ((Mark{"a.yaml", 3, 7}).ToString(), "a.yaml:3:7");
  EXPECT_EQ((Mark{"a.yaml", 0, 0}).ToString(), "a.yaml");
  EXPECT_EQ(Mark{}.ToString(), "<built-in>");
}

TEST(NodeTest, FromConfigStringFindsReferencesAndEscapes) {
  absl::StatusOr<Node> plain = Node::FromConfigString("abc");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->kind(), Node::Kind::kString);

  absl::StatusOr<Node> escaped = Node::FromConfigString("cost \\${x}");
  ASSERT_TRUE(escaped.ok());
  EXPECT_EQ(escaped->kind(), Node::Kind::kString);
  EXPECT_EQ(escaped->as_string(), "cost ${x}");

  absl::StatusOr<Node> ref = Node::FromConfigString("run_${ data.bs }_x");
  ASSERT_TRUE(ref.ok());
  ASSERT_EQ(ref->kind(), Node::Kind::kInterpolation);
  ASSERT_EQ(ref->parts().size(), 3u);
  EXPECT_EQ(ref->parts()[1].text, "data.bs");
  EXPECT_TRUE(ref->parts()[1].is_reference);
}

TEST(NodeTest, FromConfigStringRejectsUnterminatedAndEmpty) {
  Mark mark{"f.yaml", 2, 5};
  EXPECT_THAT(ErrorOf(Node::FromConfigString("a ${b", mark)),
              HasSubstr("f.yaml:2:5: unterminated '${'"));
  EXPECT_THAT(ErrorOf(Node::FromConfigString("${}", mark)), HasSubstr("empty '${}'"));
}

TEST(NodeTest, EqualityComparesValuesAndTypesNotMarks) {
  EXPECT_EQ(Node::Int(1, Mark{"a", 1, 1}), Node::Int(1, Mark{"b", 2, 2}));
  EXPECT_NE(Node::Int(1), Node::Double(1.0));
  Node a = Node::Map();
  a.Set("x", Node::Int(1));
  Node b = Node::Map();
  b.Set("x", Node::Int(2));
  EXPECT_NE(a, b);
  b.Set("x", Node::Int(1));
  EXPECT_EQ(a, b);
}

TEST(NodeTest, SetEraseFindKeepOrder) {
  Node m = Node::Map();
  m.Set("b", Node::Int(1));
  m.Set("a", Node::Int(2));
  m.Set("b", Node::Int(3));
  ASSERT_EQ(m.entries().size(), 2u);
  EXPECT_EQ(m.entries()[0].key, "b");
  EXPECT_EQ(m.Find("b")->as_int(), 3);
  EXPECT_TRUE(m.Erase("b"));
  EXPECT_FALSE(m.Erase("b"));
  EXPECT_EQ(m.Find("b"), nullptr);
  EXPECT_EQ(m.CountNodes(), 2);
}

TEST(NodeTest, SplitPathAcceptsDotsAndBrackets) {
  EXPECT_THAT(*SplitPath("a.b[0].c"), ElementsAre("a", "b", "0", "c"));
  EXPECT_THAT(*SplitPath("a.b.0"), ElementsAre("a", "b", "0"));
  EXPECT_THAT(ErrorOf(SplitPath("a..b")), HasSubstr("empty segment"));
  EXPECT_THAT(ErrorOf(SplitPath("a[x]")), HasSubstr("list index must be a number"));
  EXPECT_THAT(ErrorOf(SplitPath("a.")), HasSubstr("ends with '.'"));
  EXPECT_THAT(ErrorOf(SplitPath("")), HasSubstr("empty"));
}

TEST(SuggestTest, EditDistanceAndClosest) {
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_THAT(ClosestNames("hiden", {"hidden", "in_features", "dropout"}),
              ElementsAre("hidden"));
  EXPECT_THAT(ClosestNames("zzzzzz", {"hidden"}), ::testing::IsEmpty());
  EXPECT_EQ(DidYouMean("lr", {"lr0", "nbs"}), "; did you mean: lr0?");
}

}  // namespace
}  // namespace elastrun::config
