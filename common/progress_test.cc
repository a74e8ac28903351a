#include "common/progress.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun {
namespace {

TEST(ProgressTest, RoundTrip) {
  ProgressReport r;
  r.rank = 3;
  r.step = 1200;
  r.metrics = {{"loss", 0.25}, {"lr", 0.01}, {"bad name", 1}};
  auto back = DecodeProgress(EncodeProgress(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->step, 1200);
  EXPECT_DOUBLE_EQ(back->metrics.at("loss"), 0.25);
  EXPECT_DOUBLE_EQ(back->metrics.at("lr"), 0.01);
  EXPECT_EQ(back->metrics.count("bad_name"), 1u);
}

TEST(ProgressTest, GarbageIsRejected) {
  EXPECT_FALSE(DecodeProgress("").ok());
  EXPECT_FALSE(DecodeProgress("step=1").ok());
  EXPECT_FALSE(DecodeProgress("rank=x step=1").ok());
  EXPECT_FALSE(DecodeProgress("rank=0 step=1 loss=abc").ok());
  EXPECT_FALSE(DecodeProgress("rank=0 step=1 loss").ok());
  EXPECT_FALSE(DecodeProgress(std::string(5000, 'a')).ok());
}

TEST(BarrierArrivalTest, RoundTripAndErrors) {
  BarrierArrival a;
  a.rank = 5;
  a.local_world_size = 2;
  a.name = "exit.1";
  const std::string wire = EncodeBarrier(a);
  EXPECT_TRUE(IsBarrierDatagram(wire));
  EXPECT_FALSE(IsBarrierDatagram(EncodeProgress(ProgressReport{})));
  auto back = DecodeBarrier(wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rank, 5);
  EXPECT_EQ(back->local_world_size, 2);
  EXPECT_EQ(back->name, "exit.1");
  EXPECT_FALSE(DecodeBarrier("barrier rank=1 name=x").ok());  // no local_world_size
  EXPECT_FALSE(DecodeBarrier("barrier rank=1 local_world_size=1 name=a/b").ok());
  EXPECT_FALSE(ValidateBarrierName("").ok());
  EXPECT_TRUE(ValidateBarrierName("epoch-3_end.x").ok());
}

}  // namespace
}  // namespace elastrun
