#include "common/strings.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun {
namespace {

using ::testing::HasSubstr;

TEST(ParseIntTest, AcceptsAndBounds) {
  EXPECT_EQ(*ParseInt(" 42 ", "--x"), 42);
  auto bad = ParseInt("4x", "--nproc-per-node");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("--nproc-per-node"));
  EXPECT_THAT(bad.status().message(), HasSubstr("'4x'"));
  auto out = ParseInt("0", "--max-restarts", 1, 10);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("out of range"));
}

TEST(ParseBoolTest, Spellings) {
  EXPECT_TRUE(*ParseBool("True", "v"));
  EXPECT_FALSE(*ParseBool("0", "v"));
  EXPECT_FALSE(ParseBool("maybe", "v").ok());
}

TEST(ParseDurationTest, SecondsAndUnits) {
  EXPECT_EQ(*ParseDuration("30", "t"), absl::Seconds(30));
  EXPECT_EQ(*ParseDuration("0.5", "t"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDuration("250ms", "t"), absl::Milliseconds(250));
  EXPECT_FALSE(ParseDuration("-1", "t").ok());
  EXPECT_FALSE(ParseDuration("soon", "t").ok());
}

TEST(IsServiceNameTest, AtMost64OfLettersDigitsDotUnderscoreDash) {
  EXPECT_TRUE(IsServiceName(""));
  EXPECT_TRUE(IsServiceName("run.job-7_a"));
  EXPECT_TRUE(IsServiceName(std::string(64, 'a')));
  EXPECT_FALSE(IsServiceName(std::string(65, 'a')));
  EXPECT_FALSE(IsServiceName("a b"));
  EXPECT_FALSE(IsServiceName("gpu/a100"));
  EXPECT_FALSE(IsServiceName("j+1"));
}

TEST(ParseRangeTest, SingleAndPair) {
  auto one = *ParseRange("2", "--nnodes");
  EXPECT_EQ(one.min, 2);
  EXPECT_EQ(one.max, 2);
  auto pair = *ParseRange("1:4", "--nnodes");
  EXPECT_EQ(pair.min, 1);
  EXPECT_EQ(pair.max, 4);
  auto bad = ParseRange("3:2", "--nnodes");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("MIN 3 is greater than MAX 2"));
  EXPECT_FALSE(ParseRange("0:2", "--nnodes").ok());
  EXPECT_FALSE(ParseRange("1:2:3", "--nnodes").ok());
}

}  // namespace
}  // namespace elastrun
