// Placement by free slots: a node takes any job that fits the slots its
// other jobs leave free.
#include "rendezvous/placement.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::ElementsAre;

v1::RegisterNodeRequest Node(const std::string& id, int slots) {
  v1::RegisterNodeRequest r;
  r.set_node_id(id);
  r.set_incarnation("inc");
  r.set_addr(id + ".test");
  r.set_slots(slots);
  return r;
}

TEST(PlacementTest, ANodeRunningAJobTakesAnotherThatFitsItsFreeSlots) {
  const absl::Time now = absl::UnixEpoch();
  NodeRegistry reg(LeaseOptions{});
  reg.Register(Node("a", 8), now);
  reg.Register(Node("b", 2), now);
  reg.Reserve("a", "j1", 2);  // 6 free
  EXPECT_THAT(PickNodes(reg, 2, 10, {}), ElementsAre("a", "b"));
  EXPECT_THAT(PickNodes(reg, 6, 10, {}), ElementsAre("a"));
  EXPECT_THAT(PickNodes(reg, 7, 10, {}), ElementsAre());
  reg.Reserve("a", "j2", 6);  // full
  EXPECT_THAT(PickNodes(reg, 1, 10, {}), ElementsAre("b"));
  reg.Release("a", "j1", 2);
  EXPECT_THAT(PickNodes(reg, 2, 10, {}), ElementsAre("a", "b"));  // equal: by id
  EXPECT_THAT(PickNodes(reg, 3, 10, {}), ElementsAre());
}

}  // namespace
}  // namespace elastrun::rendezvous
