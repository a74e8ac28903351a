#include "rendezvous/registry.h"

#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/codec.h"
#include "rendezvous/coordinator_test_util.h"
#include "rendezvous/placement.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::ElementsAre;

using coordinator_testing::RegisterRequest;

TEST(RegistryTest, LeaseExpiresWithoutHeartbeat) {
  FakeClock clock;
  NodeRegistry reg(LeaseOptions{absl::Seconds(1), absl::Seconds(3)});
  ASSERT_TRUE(reg.CheckRegister(RegisterRequest("a", 2, "i1"), clock.Now()).ok());
  reg.Register(RegisterRequest("a", 2, "i1"), clock.Now());
  reg.Register(RegisterRequest("b", 2, "i1"), clock.Now());
  EXPECT_EQ(reg.NextExpiry(), clock.Now() + absl::Seconds(3));
  clock.Advance(absl::Seconds(2));
  ASSERT_TRUE(reg.Heartbeat("a", "i1", clock.Now()).ok());
  clock.Advance(absl::Seconds(1));
  EXPECT_THAT(reg.Expired(clock.Now()), ElementsAre("b"));
  reg.MarkLost("b", "lease expired", clock.Now());
  EXPECT_TRUE(reg.Expired(clock.Now()).empty());
  EXPECT_EQ(reg.NextExpiry(), clock.Now() + absl::Seconds(2));
  // A lost node must register again.
  absl::StatusOr<absl::Time> hb = reg.Heartbeat("b", "i1", clock.Now());
  EXPECT_TRUE(absl::IsNotFound(hb.status())) << hb.status();
  reg.Register(RegisterRequest("b", 2, "i1"), clock.Now());
  EXPECT_TRUE(reg.Find("b")->alive());
}

// Past max_heartbeat_rate heartbeats a second, interval and lease grow with
// the alive nodes, and the lease a heartbeat grants is the one told; lost
// nodes do not count, and a shrinking cluster shrinks them back.
TEST(RegistryTest, IntervalAndLeaseGrowWithTheCluster) {
  FakeClock clock;
  LeaseOptions options{absl::Seconds(1), absl::Seconds(3)};
  options.max_heartbeat_rate = 10;
  NodeRegistry reg(options);
  for (int i = 0; i < 10; ++i) {
    reg.Register(RegisterRequest(absl::StrCat("n", i), 1, "i1"), clock.Now());
  }
  EXPECT_EQ(reg.cadence().heartbeat_interval, absl::Seconds(1));  // 10 a second
  EXPECT_EQ(reg.cadence().lease_timeout, absl::Seconds(3));
  for (int i = 10; i < 25; ++i) {
    reg.Register(RegisterRequest(absl::StrCat("n", i), 1, "i1"), clock.Now());
  }
  EXPECT_EQ(reg.cadence().heartbeat_interval, absl::Milliseconds(2500));
  EXPECT_EQ(reg.cadence().lease_timeout, absl::Milliseconds(7500));
  absl::StatusOr<absl::Time> expiry = reg.Heartbeat("n0", "i1", clock.Now());
  ASSERT_TRUE(expiry.ok()) << expiry.status();
  EXPECT_EQ(*expiry, clock.Now() + absl::Milliseconds(7500));
  for (int i = 0; i < 20; ++i) reg.MarkLost(absl::StrCat("n", i), "test", clock.Now());
  EXPECT_EQ(reg.cadence().heartbeat_interval, absl::Seconds(1));  // 5 alive
  EXPECT_EQ(reg.cadence().lease_timeout, absl::Seconds(3));

  options.max_heartbeat_rate = 0;  // no limit
  NodeRegistry unlimited(options);
  for (int i = 0; i < 100; ++i) {
    unlimited.Register(RegisterRequest(absl::StrCat("n", i), 1, "i1"), clock.Now());
  }
  EXPECT_EQ(unlimited.cadence().heartbeat_interval, absl::Seconds(1));
  options.max_heartbeat_rate = -1;
  EXPECT_THAT(std::string(ValidateLeaseOptions(options).message()),
              ::testing::HasSubstr("max heartbeat rate -1"));
}

// The registry answers the timer's questions from time indexes (a walk
// over every node after every change was O(N^2) at 10,000 nodes); on random
// registrations, heartbeats, losses, jobs, removals and restores, the
// answers equal a walk over every node.
TEST(RegistryTest, TimeIndexesAgreeWithAWalkOverEveryNode) {
  FakeClock clock;
  LeaseOptions options{absl::Seconds(1), absl::Seconds(3)};
  options.node_expiry = absl::Seconds(20);
  NodeRegistry reg(options);
  std::mt19937 rng(7);
  auto id = [&] { return absl::StrCat("n", rng() % 40); };
  for (int step = 0; step < 20000; ++step) {
    const std::string node = id();
    switch (rng() % 8) {
      case 0:
      case 1:
        reg.Register(RegisterRequest(node, 2, absl::StrCat("i", rng() % 2)), clock.Now());
        break;
      case 2:
        if (const NodeRecord* n = reg.Find(node)) {
          (void)reg.Heartbeat(node, n->stored.incarnation(), clock.Now());
        }
        break;
      case 3:
        reg.MarkLost(node, "test", clock.Now());
        break;
      case 4:
        if (rng() % 2) {
          reg.Reserve(node, "job", 1);
        } else {
          reg.Release(node, "job", 1);
        }
        break;
      case 5:
        if (rng() % 4 == 0) reg.Remove(node);
        break;
      case 6:
        if (rng() % 4 == 0) {
          v1::StoredNode stored;
          stored.set_node_id(node);
          stored.set_incarnation("i0");
          stored.set_slots(2);
          stored.set_state(rng() % 2 ? v1::NODE_STATE_ALIVE : v1::NODE_STATE_LOST);
          reg.Restore(stored, clock.Now());
        }
        break;
      default:
        clock.Advance(absl::Milliseconds(rng() % 1500));
    }
    const absl::Time now = clock.Now();
    std::vector<std::string> expired, expired_lost;
    std::optional<absl::Time> next, next_lost;
    for (const auto& [nid, n] : reg.nodes()) {
      if (n.alive()) {
        if (n.lease_expiry <= now) expired.push_back(nid);
        if (!next || n.lease_expiry < *next) next = n.lease_expiry;
      } else if (n.jobs.empty()) {
        const absl::Time due = FromProto(n.stored.lost_time()) + options.node_expiry;
        if (due <= now) expired_lost.push_back(nid);
        if (!next_lost || due < *next_lost) next_lost = due;
      }
    }
    ASSERT_THAT(reg.Expired(now), ::testing::UnorderedElementsAreArray(expired)) << step;
    ASSERT_EQ(reg.NextExpiry(), next) << step;
    ASSERT_THAT(reg.ExpiredLost(now), ::testing::UnorderedElementsAreArray(expired_lost))
        << step;
    ASSERT_EQ(reg.NextLostExpiry(), next_lost) << step;
  }
}

TEST(RegistryTest, NewIncarnationIsRefusedWhileTheHoldersLeaseIsLive) {
  FakeClock clock;
  NodeRegistry reg(LeaseOptions{});  // 3 s leases
  reg.Register(RegisterRequest("a", 2, "i1"), clock.Now());
  absl::StatusOr<NodeRegistry::Registered> same =
      reg.CheckRegister(RegisterRequest("a", 2, "i1"), clock.Now());
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->restarted);  // a reconnect
  clock.Advance(absl::Seconds(1));
  absl::StatusOr<NodeRegistry::Registered> other =
      reg.CheckRegister(RegisterRequest("a", 2, "i2"), clock.Now());
  EXPECT_TRUE(absl::IsAlreadyExists(other.status())) << other.status();
  EXPECT_THAT(std::string(other.status().message()),
              ::testing::AllOf(
                  ::testing::HasSubstr("node \"a\" is held by another daemon at a.test"),
                  ::testing::HasSubstr("lease expires in 2s")));
  EXPECT_TRUE(absl::IsFailedPrecondition(reg.Heartbeat("a", "i2", clock.Now()).status()));
  // The holder's lease runs out (not yet marked lost by a timer): a restart.
  clock.Advance(absl::Seconds(2));
  other = reg.CheckRegister(RegisterRequest("a", 2, "i2"), clock.Now());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(other->restarted);
}

TEST(RegistryTest, RestoredNodeIsTakenByANewIncarnationUntilItsDaemonReturns) {
  FakeClock clock;
  NodeRegistry reg(LeaseOptions{});
  v1::StoredNode stored;
  stored.set_node_id("a");
  stored.set_incarnation("i1");
  stored.set_addr("a.test");
  stored.set_slots(2);
  stored.set_state(v1::NODE_STATE_ALIVE);
  reg.Restore(stored, clock.Now());
  // The service restarted; no daemon has proved the node alive since.
  absl::StatusOr<NodeRegistry::Registered> other =
      reg.CheckRegister(RegisterRequest("a", 2, "i2"), clock.Now());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(other->restarted);
  // Once its daemon re-registered, the lease counts.
  reg.Register(RegisterRequest("a", 2, "i1"), clock.Now());
  EXPECT_TRUE(
      absl::IsAlreadyExists(reg.CheckRegister(RegisterRequest("a", 2, "i2"), clock.Now()).status()));
}

TEST(RegistryTest, BadRequestsNameTheField) {
  NodeRegistry reg(LeaseOptions{});
  v1::RegisterNodeRequest r = RegisterRequest("a", 0, "i1");
  absl::Status st = reg.CheckRegister(r, absl::UnixEpoch()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("RegisterNode.slots"));
  r = RegisterRequest("", 1, "i1");
  EXPECT_THAT(std::string(reg.CheckRegister(r, absl::UnixEpoch()).status().message()),
              ::testing::HasSubstr("RegisterNode.node_id"));
  // A NUL (or another control character) would cut the id short in the
  // places that print it or name a folder after it.
  r = RegisterRequest(std::string("node\0b", 6), 1, "i1");
  st = reg.CheckRegister(r, absl::UnixEpoch()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("RegisterNode.node_id"));
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("\"node\\x00"));
  r = RegisterRequest("node\nb", 1, "i1");
  EXPECT_TRUE(absl::IsInvalidArgument(reg.CheckRegister(r, absl::UnixEpoch()).status()));
  r = RegisterRequest("a", 1, "i1");
  r.set_pool("run/1");
  st = reg.CheckRegister(r, absl::UnixEpoch()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()),
              ::testing::HasSubstr("RegisterNode.pool: \"run/1\""));
  r.set_pool("run.mn-1_b");
  EXPECT_TRUE(reg.CheckRegister(r, absl::UnixEpoch()).ok());
  EXPECT_FALSE(ValidateLeaseOptions({absl::Seconds(3), absl::Seconds(3)}).ok());
}

TEST(PlacementTest, PicksNodesWithFreeSlotsMostFreeFirst) {
  FakeClock clock;
  NodeRegistry reg(LeaseOptions{});
  reg.Register(RegisterRequest("a", 2, "i1"), clock.Now());
  reg.Register(RegisterRequest("b", 4, "i1"), clock.Now());
  reg.Register(RegisterRequest("c", 1, "i1"), clock.Now());
  reg.Register(RegisterRequest("d", 2, "i1"), clock.Now());
  EXPECT_THAT(PickNodes(reg, "", 2, 10, {}), ElementsAre("b", "a", "d"));
  reg.Reserve("b", "j1", 3);
  EXPECT_THAT(PickNodes(reg, "", 2, 10, {}), ElementsAre("a", "d"));
  EXPECT_THAT(PickNodes(reg, "", 2, 1, {"a"}), ElementsAre("d"));
  reg.Release("b", "j1", 3);
  reg.MarkLost("a", "test", clock.Now());
  EXPECT_THAT(PickNodes(reg, "", 1, 10, {}), ElementsAre("b", "d", "c"));
}

// Short jobs, one after another, over equal nodes: each goes to the node
// placed on least recently among those with the most free slots, so they
// spread (they all went to the first node by id before).
TEST(PlacementTest, ShortJobsOverEqualNodesSpreadEvenly) {
  FakeClock clock;
  NodeRegistry reg(LeaseOptions{});
  for (const char* id : {"a", "b", "c"}) reg.Register(RegisterRequest(id, 2, "i1"), clock.Now());
  std::map<std::string, int> placed;
  for (int i = 0; i < 30; ++i) {
    const std::string job = absl::StrCat("j", i);
    std::vector<std::string> picked = PickNodes(reg, "", 1, 1, {});
    ASSERT_EQ(picked.size(), 1u);
    reg.Reserve(picked[0], job, 1);
    ++placed[picked[0]];
    reg.Release(picked[0], job, 1);  // done before the next one comes
  }
  EXPECT_EQ(placed, (std::map<std::string, int>{{"a", 10}, {"b", 10}, {"c", 10}}));
  // Free slots still come first: a busier node waits its turn.
  reg.Reserve("a", "long", 1);
  EXPECT_THAT(PickNodes(reg, "", 1, 3, {}), ElementsAre("b", "c", "a"));
}

TEST(RegistryTest, ALostNodeExpiresExactlyAfterTheConfiguredTime) {
  FakeClock clock;
  NodeRegistry reg(LeaseOptions{absl::Seconds(1), absl::Seconds(3), absl::Minutes(10)});
  reg.Register(RegisterRequest("a", 2, "i1"), clock.Now());
  reg.Register(RegisterRequest("b", 2, "i1"), clock.Now());
  EXPECT_EQ(reg.NextLostExpiry(), std::nullopt);  // alive nodes never expire
  reg.MarkLost("a", "lease expired", clock.Now());
  const absl::Time due = clock.Now() + absl::Minutes(10);
  EXPECT_EQ(reg.NextLostExpiry(), due);
  clock.Advance(absl::Minutes(10) - absl::Milliseconds(1));
  EXPECT_TRUE(reg.ExpiredLost(clock.Now()).empty());
  clock.Advance(absl::Milliseconds(1));
  EXPECT_THAT(reg.ExpiredLost(clock.Now()), ElementsAre("a"));
  reg.Remove("a");
  EXPECT_EQ(reg.Find("a"), nullptr);
  EXPECT_EQ(reg.NextLostExpiry(), std::nullopt);
  // Registering again is a fresh node, registered now.
  reg.Register(RegisterRequest("a", 2, "i1"), clock.Now());
  EXPECT_EQ(FromProto(reg.Find("a")->stored.registered_time()), clock.Now());
}

TEST(RegistryTest, ALostNodeHoldingAJobsSlotsIsKeptUntilTheJobLetsGo) {
  FakeClock clock;
  NodeRegistry reg(LeaseOptions{absl::Seconds(1), absl::Seconds(3), absl::Seconds(60)});
  reg.Register(RegisterRequest("a", 2, "i1"), clock.Now());
  reg.Reserve("a", "job-1", 2);
  reg.MarkLost("a", "lease expired", clock.Now());
  clock.Advance(absl::Hours(1));
  EXPECT_TRUE(reg.ExpiredLost(clock.Now()).empty());
  EXPECT_EQ(reg.NextLostExpiry(), std::nullopt);
  reg.Release("a", "job-1", 2);
  EXPECT_THAT(reg.ExpiredLost(clock.Now()), ElementsAre("a"));
}

TEST(RegistryTest, ARegisteredNodeIsNoLongerLostAndAnInfiniteExpiryNeverFires) {
  FakeClock clock;
  NodeRegistry reg(LeaseOptions{absl::Seconds(1), absl::Seconds(3), absl::Seconds(60)});
  reg.Register(RegisterRequest("a", 2, "i1"), clock.Now());
  reg.MarkLost("a", "lease expired", clock.Now());
  clock.Advance(absl::Seconds(30));
  reg.Register(RegisterRequest("a", 2, "i2"), clock.Now());
  clock.Advance(absl::Seconds(60));
  EXPECT_TRUE(reg.ExpiredLost(clock.Now()).empty());
  EXPECT_FALSE(reg.Find("a")->stored.has_lost_time());

  NodeRegistry forever(
      LeaseOptions{absl::Seconds(1), absl::Seconds(3), absl::InfiniteDuration()});
  forever.Register(RegisterRequest("a", 2, "i1"), clock.Now());
  forever.MarkLost("a", "lease expired", clock.Now());
  clock.Advance(absl::Hours(24 * 365));
  EXPECT_TRUE(forever.ExpiredLost(clock.Now()).empty());
  EXPECT_EQ(forever.NextLostExpiry(), std::nullopt);
  EXPECT_TRUE(ValidateLeaseOptions(forever.options()).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateLeaseOptions(
      LeaseOptions{absl::Seconds(1), absl::Seconds(3), absl::ZeroDuration()})));
}

TEST(RegistryTest, ALostNodeFromAnOlderFileCountsAsLostSinceTheRestore) {
  FakeClock clock;
  NodeRegistry reg(LeaseOptions{absl::Seconds(1), absl::Seconds(3), absl::Seconds(60)});
  v1::StoredNode stored;
  stored.set_node_id("a");
  stored.set_slots(1);
  stored.set_state(v1::NODE_STATE_LOST);  // no lost_time: written before expiry existed
  reg.Restore(stored, clock.Now());
  EXPECT_EQ(reg.NextLostExpiry(), clock.Now() + absl::Seconds(60));
}

TEST(RegistryTest, DrainingIsKeptWhenTheDaemonRegistersAgain) {
  FakeClock clock;
  NodeRegistry reg(LeaseOptions{});
  reg.Register(RegisterRequest("a", 2, "i1"), clock.Now());
  ASSERT_TRUE(reg.SetDraining("a", true).ok());
  reg.MarkLost("a", "watch stream closed", clock.Now());
  reg.Register(RegisterRequest("a", 2, "i2"), clock.Now());
  EXPECT_TRUE(reg.Find("a")->draining());
  EXPECT_TRUE(absl::IsNotFound(reg.SetDraining("nope", true)));
}

}  // namespace
}  // namespace elastrun::rendezvous
