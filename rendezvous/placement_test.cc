// Placement rules beyond the registry's slot accounting.
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

TEST(PlacementTest, NodeRunningAJobIsFullWhateverItsFreeSlots) {
  const absl::Time now = absl::UnixEpoch();
  NodeRegistry reg(LeaseOptions{});
  reg.Register(Node("a", 8), now);
  reg.Register(Node("b", 2), now);
  reg.Reserve("a", "j1", 2);  // 6 slots left, but a daemon runs one job
  EXPECT_THAT(PickNodes(reg, 2, 10, {}), ElementsAre("b"));
  reg.Release("a", "j1", 2);
  EXPECT_THAT(PickNodes(reg, 2, 10, {}), ElementsAre("a", "b"));
}

}  // namespace
}  // namespace elastrun::rendezvous
