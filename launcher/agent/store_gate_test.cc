#include "launcher/agent/store_gate.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/agent/attempt_spec.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);

TEST(StoreGateTest, HoldsOnlyOtherRanksAndOnlyWhenClosed) {
  StoreGate closed(true, 29500, [](int) { return false; });
  EXPECT_FALSE(closed.Holds(0));
  EXPECT_TRUE(closed.Holds(1));
  StoreGate open(false, 29500, [](int) { return false; });
  EXPECT_FALSE(open.Holds(1));
  StoreGate no_port(true, 0, [](int) { return false; });
  EXPECT_FALSE(no_port.Holds(1));
}

TEST(StoreGateTest, LooksOnlyOnceRankZeroStartedAndReleasesOnListen) {
  bool listening = false;
  std::vector<int> looked;
  StoreGate gate(true, 29500, [&](int port) {
    looked.push_back(port);
    return listening;
  });
  gate.Hold(1, "a1");
  gate.Hold(2, "a2");
  EXPECT_THAT(gate.Poll(kT0), IsEmpty());
  EXPECT_EQ(gate.NextPoll(kT0), std::nullopt) << "rank 0 has not started";
  EXPECT_THAT(looked, IsEmpty());
  gate.RankZeroStarted(kT0);
  EXPECT_EQ(gate.NextPoll(kT0), kT0 + kStoreGatePoll);
  EXPECT_THAT(gate.Poll(kT0), IsEmpty());
  EXPECT_THAT(looked, ElementsAre(29500));
  listening = true;
  EXPECT_THAT(gate.Poll(kT0 + kStoreGatePoll), ElementsAre(Pair(1, "a1"), Pair(2, "a2")));
  EXPECT_TRUE(gate.open());
  EXPECT_FALSE(gate.Holds(1));
  EXPECT_EQ(gate.NextPoll(kT0), std::nullopt);
}

TEST(StoreGateTest, ReleasesAfterTheLongestHoldWithoutAStore) {
  StoreGate gate(true, 29500, [](int) { return false; });
  gate.Hold(1, "a1");
  gate.RankZeroStarted(kT0);
  gate.RankZeroStarted(kT0 + absl::Milliseconds(500));  // only the first counts
  EXPECT_THAT(gate.Poll(kT0 + kStoreGateMax - absl::Milliseconds(1)), IsEmpty());
  EXPECT_EQ(gate.NextPoll(kT0 + kStoreGateMax - absl::Microseconds(500)), kT0 + kStoreGateMax)
      << "the last look is at the limit";
  EXPECT_THAT(gate.Poll(kT0 + kStoreGateMax), ElementsAre(Pair(1, "a1")));
}

}  // namespace
}  // namespace elastrun::launcher
