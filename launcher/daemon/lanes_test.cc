// Lanes: order within a lane, lanes beside each other, and nothing queued
// lost at destruction. Waits are on events with generous deadlines.
#include "launcher/daemon/lanes.h"

#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;

constexpr absl::Duration kWait = absl::Seconds(60);

TEST(LanesTest, ALaneRunsItsTasksInOrderWhileABlockedLaneWaits) {
  absl::Notification blocked, release;
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification last;
  Lanes lanes;  // last: its threads end before what they use goes
  // A failed ASSERT below returns with the slow task still waiting: let it
  // go, or the destructor would wait for it for ever.
  absl::Cleanup unblock = [&] {
    if (!release.HasBeenNotified()) release.Notify();
  };
  lanes.Post("slow", [&] {
    blocked.Notify();
    release.WaitForNotification();
  });
  ASSERT_TRUE(blocked.WaitForNotificationWithTimeout(kWait));
  for (int i = 0; i < 100; ++i) {
    lanes.Post("fast", [&, i] {
      absl::MutexLock lock(&mu);
      order.push_back(i);
      if (i == 99) last.Notify();
    });
  }
  EXPECT_TRUE(last.WaitForNotificationWithTimeout(kWait)) << "the fast lane waited";
  EXPECT_FALSE(lanes.WaitIdle(absl::ZeroDuration())) << "the slow lane still runs";
  release.Notify();
  EXPECT_TRUE(lanes.WaitIdle(kWait));
  absl::MutexLock lock(&mu);
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(LanesTest, ALaneThatWentIdleTakesNewTasksAndTheDestructorRunsWhatIsQueued) {
  std::vector<std::string> ran;
  absl::Mutex mu;
  {
    absl::Notification release;  // outlives the lanes' threads
    Lanes lanes;
    for (int round = 0; round < 20; ++round) {
      lanes.Post("a", [&, round] {
        absl::MutexLock lock(&mu);
        ran.push_back(absl::StrCat("a", round));
      });
      ASSERT_TRUE(lanes.WaitIdle(kWait));
    }
    lanes.Post("b", [&] { release.WaitForNotification(); });
    lanes.Post("b", [&] {
      absl::MutexLock lock(&mu);
      ran.push_back("b-after");
    });
    release.Notify();
  }  // waits for "b-after"
  absl::MutexLock lock(&mu);
  EXPECT_EQ(ran.size(), 21u);
  EXPECT_EQ(ran.back(), "b-after");
}

}  // namespace
}  // namespace elastrun::launcher
