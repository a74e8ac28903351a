// Placement by free slots: a node takes any job that fits the slots its
// other jobs leave free.
#include "rendezvous/placement.h"

#include "absl/strings/str_cat.h"
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
  EXPECT_THAT(PickNodes(reg, "", 2, 10, {}), ElementsAre("a", "b"));
  EXPECT_THAT(PickNodes(reg, "", 6, 10, {}), ElementsAre("a"));
  EXPECT_THAT(PickNodes(reg, "", 7, 10, {}), ElementsAre());
  reg.Reserve("a", "j2", 6);  // full
  EXPECT_THAT(PickNodes(reg, "", 1, 10, {}), ElementsAre("b"));
  reg.Release("a", "j1", 2);
  // Equal: the one placed on least recently first (b never was).
  EXPECT_THAT(PickNodes(reg, "", 2, 10, {}), ElementsAre("b", "a"));
  EXPECT_THAT(PickNodes(reg, "", 3, 10, {}), ElementsAre());
}

TEST(PlacementTest, WhetherAnyNodesCouldEverHoldAJobCountsTotalSlotsOfAliveNodes) {
  const absl::Time now = absl::UnixEpoch();
  NodeRegistry reg(LeaseOptions{});
  EXPECT_EQ(WhyNoNodesCanHold(reg, "", 1, 1),
            "job needs 1 node(s) with 1 slot each; registered: none alive");
  reg.Register(Node("a", 2), now);
  reg.Register(Node("b", 1), now);
  reg.Reserve("a", "j1", 2);  // busy, but it will free up
  EXPECT_EQ(WhyNoNodesCanHold(reg, "", 2, 1), std::nullopt);
  EXPECT_EQ(WhyNoNodesCanHold(reg, "", 1, 2), std::nullopt);
  EXPECT_EQ(WhyNoNodesCanHold(reg, "", 2, 2),
            "job needs 2 node(s) with 2 slots each; registered: a (2 slots), b (1 slot)");
  reg.MarkLost("a", "gone", absl::UnixEpoch());
  EXPECT_EQ(WhyNoNodesCanHold(reg, "", 2, 1),
            "job needs 1 node(s) with 2 slots each; registered: b (1 slot)");
}

TEST(PlacementTest, ARefusalNamesAFewNodesBiggestFirstAndCountsTheRest) {
  const absl::Time now = absl::UnixEpoch();
  NodeRegistry reg(LeaseOptions{});
  for (int i = 0; i < 20; ++i) reg.Register(Node(absl::StrCat("n", 10 + i), 1), now);
  reg.Register(Node("n99", 3), now);
  EXPECT_EQ(
      WhyNoNodesCanHold(reg, "", 4, 1),
      "job needs 1 node(s) with 4 slots each; registered: n99 (3 slots), n10 (1 "
      "slot), n11 (1 slot), n12 (1 slot), n13 (1 slot), n14 (1 slot), n15 (1 slot), "
      "n16 (1 slot) and 13 more with at most 1 slot each");
}

TEST(PlacementTest, HeldSlotsAreNotFreeForTheJobsBehind) {
  const absl::Time now = absl::UnixEpoch();
  NodeRegistry reg(LeaseOptions{});
  reg.Register(Node("a", 4), now);
  reg.Register(Node("b", 2), now);
  reg.Reserve("a", "running", 1);  // a: 3 free
  HeldSlots held;
  // A 4-slot job fits only a, once it is empty: a's slots are held for it.
  ASSERT_THAT(PickNodes(reg, "", 4, 1, {}, held), ElementsAre());
  ASSERT_TRUE(HoldSlotsFor(reg, "", 4, 1, held));
  EXPECT_EQ(held, (HeldSlots{{"a", 4}}));
  EXPECT_THAT(PickNodes(reg, "", 1, 10, {}, held), ElementsAre("b"));
  // A second 4-slot job finds no node left to hold: it holds nothing.
  EXPECT_FALSE(HoldSlotsFor(reg, "", 4, 1, held));
  EXPECT_EQ(held, (HeldSlots{{"a", 4}}));
  // A 2x2 job would need a and b; a is held: it holds nothing either.
  EXPECT_FALSE(HoldSlotsFor(reg, "", 2, 2, held));
  // Nor does a job waiting for nodes that are not registered.
  EXPECT_FALSE(HoldSlotsFor(reg, "", 8, 1, held));
  // A node with more slots than a holder needs keeps the rest free.
  HeldSlots part;
  ASSERT_TRUE(HoldSlotsFor(reg, "", 2, 1, part));  // the most free: a (3)
  EXPECT_EQ(part, (HeldSlots{{"a", 2}}));
  EXPECT_THAT(PickNodes(reg, "", 1, 10, {}, part), ElementsAre("b", "a"));
}

TEST(PlacementTest, ADrainingNodeTakesNoNewJobAndHoldsNoSlots) {
  const absl::Time now = absl::UnixEpoch();
  NodeRegistry reg(LeaseOptions{});
  reg.Register(Node("a", 4), now);
  reg.Register(Node("b", 2), now);
  ASSERT_TRUE(reg.SetDraining("a", true).ok());
  EXPECT_THAT(PickNodes(reg, "", 1, 10, {}), ElementsAre("b"));
  HeldSlots held;
  EXPECT_FALSE(HoldSlotsFor(reg, "", 4, 1, held));
  EXPECT_TRUE(held.empty());
  EXPECT_EQ(WhyNoNodesCanHold(reg, "", 4, 1),
            "job needs 1 node(s) with 4 slots each; registered: b (2 slots); 1 draining");
  ASSERT_TRUE(reg.SetDraining("a", false).ok());
  EXPECT_THAT(PickNodes(reg, "", 1, 10, {}), ElementsAre("a", "b"));
  EXPECT_EQ(WhyNoNodesCanHold(reg, "", 4, 1), std::nullopt);
}

TEST(PlacementTest, AJobIsPlacedOnNodesOfItsOwnPoolAlone) {
  const absl::Time now = absl::UnixEpoch();
  NodeRegistry reg(LeaseOptions{});
  reg.Register(Node("a", 8), now);  // the default pool
  v1::RegisterNodeRequest b = Node("b", 2);
  b.set_pool("run.mn1");
  reg.Register(b, now);
  v1::RegisterNodeRequest c = Node("c", 2);
  c.set_pool("run.other");
  reg.Register(c, now);
  EXPECT_THAT(PickNodes(reg, "", 1, 10, {}), ElementsAre("a"));
  EXPECT_THAT(PickNodes(reg, "run.mn1", 1, 10, {}), ElementsAre("b"));
  EXPECT_THAT(PickNodes(reg, "run.mn1", 4, 10, {}), ElementsAre());  // a has them
  EXPECT_THAT(PickNodes(reg, "nowhere", 1, 10, {}), ElementsAre());
  EXPECT_EQ(WhyNoNodesCanHold(reg, "run.mn1", 2, 1), std::nullopt);
  EXPECT_EQ(WhyNoNodesCanHold(reg, "run.mn1", 2, 2),
            "job needs 2 node(s) with 2 slots each in pool run.mn1; registered there: b "
            "(2 slots)");
  EXPECT_EQ(WhyNoNodesCanHold(reg, "", 4, 2),
            "job needs 2 node(s) with 4 slots each; registered: a (8 slots)");
  // Slots are held only on the job's own pool's nodes.
  HeldSlots held;
  EXPECT_FALSE(HoldSlotsFor(reg, "run.mn1", 4, 1, held));
  ASSERT_TRUE(HoldSlotsFor(reg, "run.other", 2, 1, held));
  EXPECT_EQ(held, (HeldSlots{{"c", 2}}));
  EXPECT_THAT(PickNodes(reg, "", 1, 10, {}, held), ElementsAre("a"));
}

}  // namespace
}  // namespace elastrun::rendezvous
