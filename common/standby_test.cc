#include "common/standby.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun {
namespace {

TEST(StandbyActivationTest, RoundTripInPieces) {
  const std::string wire = EncodeActivation({"RANK=3", "MSG=a=b\nc"});
  ActivationDecoder d;
  for (size_t i = 0; i + 1 < wire.size(); ++i) {
    ASSERT_FALSE(*d.Feed(&wire[i], 1));
  }
  ASSERT_TRUE(*d.Feed(&wire.back(), 1));
  EXPECT_THAT(d.entries(), ::testing::ElementsAre("RANK=3", "MSG=a=b\nc"));
}

TEST(StandbyActivationTest, EmptyActivationAndErrors) {
  ActivationDecoder empty;
  const std::string wire = EncodeActivation({});
  EXPECT_TRUE(*empty.Feed(wire.data(), wire.size()));
  EXPECT_TRUE(empty.entries().empty());
  EXPECT_FALSE(empty.Feed("x", 1).ok());  // after the end

  ActivationDecoder bad;
  const std::string junk("NOEQUALS\0", 9);
  auto r = bad.Feed(junk.data(), junk.size());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("NOEQUALS"));
}

}  // namespace
}  // namespace elastrun
