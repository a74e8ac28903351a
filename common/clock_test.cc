#include "common/clock.h"

#include "gtest/gtest.h"

namespace elastrun {
namespace {

TEST(FakeClockTest, MovesOnlyWhenTold) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  EXPECT_EQ(clock.Now(), start);
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(clock.Now() - start, absl::Seconds(3));
  clock.Set(start);
  EXPECT_EQ(clock.Now(), start);
}

TEST(RealClockTest, IsCloseToAbslNow) {
  EXPECT_LT(absl::AbsDuration(RealClock().Now() - absl::Now()), absl::Seconds(5));
}

}  // namespace
}  // namespace elastrun
